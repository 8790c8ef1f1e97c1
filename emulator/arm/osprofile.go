package arm

import (
	"encoding/base64"
	"net/http"
	"strings"
)

// The OS profile's rules, shared by VMs and scale sets: computer names,
// admin user names and passwords, custom data and its secrets.

// validateComputerName applies Azure's host-name rules (resource-name-rules,
// Microsoft.Compute; the OSProfile's computerName in the Compute REST spec):
// Windows at most 15 characters, not entirely numeric, none of the
// characters in windowsNameChars; Linux at most 64, none of them but the
// period. A whole name (not a scale set's prefix) must not end in a hyphen
// or, on Linux, a period.
func validateComputerName(name, os, target string, limit int) *armError {
	prefix := target == "computerNamePrefix"
	if os == "Windows" {
		what := "computer name"
		if prefix {
			what = "computer name prefix"
		}
		if name == "" || len(name) > limit || strings.Trim(name, "0123456789") == "" || strings.ContainsAny(name, windowsNameChars+" ") || (!prefix && strings.HasSuffix(name, "-")) {
			return invalidParameter(target, "Windows %s cannot be more than %d characters long, be entirely numeric, end with a hyphen, or contain the following characters: %s", what, limit, windowsNameChars)
		}
		return nil
	}
	linuxChars := strings.ReplaceAll(windowsNameChars, ".", "")
	if name == "" || len(name) > limit || strings.ContainsAny(name, linuxChars+" ") || (!prefix && (strings.HasSuffix(name, "-") || strings.HasSuffix(name, "."))) {
		return invalidParameter(target, "Linux host name cannot exceed %d characters in length, end with a hyphen or period, or contain the following characters: %s", limit, linuxChars)
	}
	return nil
}

// takeSecrets moves the admin password and custom data out of an OS
// profile into the resource's secrets: Azure never returns them.
func takeSecrets(r *resource, osProfile map[string]any, old *resource) *armError {
	for _, f := range []string{"adminPassword", "customData"} {
		v, ok := osProfile[f].(string)
		delete(osProfile, f)
		if !ok {
			continue
		}
		if f == "customData" {
			raw, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				return invalidParameter("customData", "Custom data in OSProfile must be in Base64 encoding and with a maximum length of %d characters.", base64.StdEncoding.EncodedLen(maxCustomData))
			}
			if len(raw) > maxCustomData {
				return invalidParameter("customData", "Custom data in OSProfile must be in Base64 encoding and with a maximum length of %d characters.", base64.StdEncoding.EncodedLen(maxCustomData))
			}
			if old != nil {
				if prev, ok := old.secrets[f].(string); ok && prev != v {
					return errorf(http.StatusConflict, "PropertyChangeNotAllowed", "Changing property 'customData' is not allowed.")
				}
			}
		}
		r.secrets[f] = v
	}
	return nil
}

func validateOSProfile(osProfile map[string]any, os string, secrets map[string]any) *armError {
	user := str(osProfile, "adminUsername")
	if user == "" {
		return invalidParameter("adminUsername", "Required parameter 'adminUsername' is missing (null).")
	}
	if e := validateAdminUsername(user, os); e != nil {
		return e
	}
	password, hasPassword := secrets["adminPassword"].(string)
	if os == "Windows" && !hasPassword {
		return invalidParameter("adminPassword", "Required parameter 'adminPassword' is missing (null).")
	}
	if hasPassword {
		if e := validateAdminPassword(password, os); e != nil {
			return e
		}
	}
	if os == "Linux" && !hasPassword && len(list(osProfile, "linuxConfiguration", "ssh", "publicKeys")) == 0 {
		return invalidParameter("linuxConfiguration", "Authentication using either SSH or by user name and password must be enabled in Linux profile.")
	}
	return nil
}

// reservedUsernames are the adminUsername values the Compute API refuses
// (OSProfile.adminUsername in azure-rest-api-specs' virtualMachine.json).
var reservedUsernames = map[string]bool{}

func init() {
	for _, n := range strings.Fields(`administrator admin user user1 test user2 test1 user3 admin1 1 123 a actuser adm admin2
		aspnet backup console david guest john owner root server sql support support_388945a0 sys test2 test3 user4 user5`) {
		reservedUsernames[n] = true
	}
}

// validateAdminUsername applies the same spec's rules: the disallowed
// values, at most 20 characters on Windows and 64 on Linux, and no trailing
// period on Windows.
func validateAdminUsername(user, os string) *armError {
	limit := 64
	if os == "Windows" {
		limit = 20
	}
	if reservedUsernames[strings.ToLower(user)] || len(user) > limit || (os == "Windows" && strings.HasSuffix(user, ".")) || strings.ContainsAny(user, `\/"[]:|<>+=;,?*@`) {
		return invalidParameter("adminUsername", "The Admin Username specified is not allowed.")
	}
	return nil
}

// disallowedPasswords are the adminPassword values the Compute API refuses.
var disallowedPasswords = map[string]bool{
	"abc@123": true, "P@$$w0rd": true, "P@ssw0rd": true, "P@ssword123": true, "Pa$$word": true,
	"pass@word1": true, "Password!": true, "Password1": true, "Password22": true, "iloveyou!": true,
}

// validateAdminPassword applies the Compute API's password rules
// (OSProfile.adminPassword): 8 to 123 characters on Windows, 6 to 72 on
// Linux; three of lower case, upper case, digit and special character
// ([\W_]); no control characters; none of the disallowed values.
func validateAdminPassword(p, os string) *armError {
	lo, hi := 6, 72
	if os == "Windows" {
		lo, hi = 8, 123
	}
	var lower, upper, digit, special, control bool
	for _, c := range p {
		switch {
		case c < 0x20 || c == 0x7f:
			control = true
		case c >= 'a' && c <= 'z':
			lower = true
		case c >= 'A' && c <= 'Z':
			upper = true
		case c >= '0' && c <= '9':
			digit = true
		default:
			special = true
		}
	}
	classes := 0
	for _, b := range []bool{lower, upper, digit, special} {
		if b {
			classes++
		}
	}
	n := len([]rune(p))
	if n < lo || n > hi || classes < 3 || control || disallowedPasswords[p] {
		return invalidParameter("adminPassword", "The supplied password must be between %d-%d characters long and must satisfy at least 3 of password complexity requirements from the following:\r\n1) Contains an uppercase character\r\n2) Contains a lowercase character\r\n3) Contains a numeric digit\r\n4) Contains a special character\r\n5) Control characters are not allowed", lo, hi)
	}
	return nil
}

// checkProfile validates the image and OS profile of a VM or scale-set
// model: it settles the OS, defaults and checks the computer name (or
// prefix, nameField) against the OS's limit, and moves secrets aside. With
// old set, custom data must not change.
func (s *Server) checkProfile(r, old *resource, storage, osProfile map[string]any, nameField string, windowsLimit, linuxLimit int) (string, *armError) {
	ref, _ := storage["imageReference"].(map[string]any)
	os, imageGB, e := s.imageOf(ref, str(r.body, "location"))
	if e != nil {
		return "", e
	}
	osDisk := obj(storage, "osDisk")
	osDisk["osType"] = os
	if size, _ := osDisk["diskSizeGB"].(float64); size != 0 && size < imageGB {
		e := errorf(http.StatusConflict, "OperationNotAllowed", "The specified disk size %v GB is smaller than the size of the corresponding disk in the VM image: %v GB. This is not allowed. Please choose equal or greater size or do not specify an explicit size.", size, imageGB)
		e.Target = "osDisk.diskSizeGB"
		return "", e
	} else if size == 0 {
		osDisk["diskSizeGB"] = imageGB
	}
	if str(osProfile, nameField) == "" {
		osProfile[nameField] = r.id.Name()
	}
	limit := linuxLimit
	if os == "Windows" {
		limit = windowsLimit
	}
	if e := validateComputerName(str(osProfile, nameField), os, nameField, limit); e != nil {
		return "", e
	}
	if e := takeSecrets(r, osProfile, old); e != nil {
		return "", e
	}
	return os, validateOSProfile(osProfile, os, r.secrets)
}
