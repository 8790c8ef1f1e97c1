package bootagent

import (
	"os"
	"path/filepath"
	"strconv"

	"github.com/winkube/winkube/emulator/machines/bootdata"
)

const writeFilesModule = "<module 'cloudinit.config.cc_write_files' from '/usr/lib/python3/dist-packages/cloudinit/config/cc_write_files.py'>"

// writeFiles writes the files as the machine's agent does. cloud-init's
// write_files module raises on the first entry that does not decode, so
// that entry and every later one (Cluster API's kubeadm configuration
// comes after the user's files) are not written, and the module is
// reported failed; the boot goes on to its other modules. cloudbase-init
// logs the failing step and writes what it has.
func (a *Agent) writeFiles(files []bootdata.File) {
	if a.Windows {
		a.cloudbaseInitWriteFiles(files)
		return
	}
	for _, f := range files {
		d := bootdata.Decode(f.Raw, f.Encoding)
		if d.Unknown {
			a.cloudInit("cc_write_files.py", "WARNING", "Unknown encoding type %s, assuming text/plain", f.Encoding)
		}
		if d.Err != nil {
			a.cloudInit("log_util.py", "WARNING", "Running module write_files (%s) failed", writeFilesModule)
			a.cloudInit("log_util.py", "DEBUG", "Running module write_files (%s) failed\nTraceback (most recent call last):\n%s", writeFilesModule, pythonError(d))
			return
		}
		mode, ok := octal(f.Permissions, 0o644)
		if !ok {
			a.cloudInit("cc_write_files.py", "WARNING", "Undecodable permissions %s, returning default 644", f.Permissions)
		}
		a.write(f.Path, d.Content, mode)
	}
}

func (a *Agent) cloudbaseInitWriteFiles(files []bootdata.File) {
	const logger = "plugins.common.userdataplugins.cloudconfigplugins.write_files"
	for _, f := range files {
		steps, unknown := bootdata.Steps(f.Encoding)
		if unknown {
			a.cloudbaseInit(logger, "WARNING", "Unknown encoding, assuming plain text.")
		}
		content := []byte(f.Raw)
		for _, s := range steps {
			out, err := bootdata.DecodeStep(s, content)
			if err != nil {
				what := "Fail to decode base64 content."
				if s == bootdata.StepGzip {
					what = "Fail to decompress gzip content."
				}
				// LOG.exception: the message, then the traceback.
				a.cloudbaseInit(logger, "ERROR", "%s", what)
				a.output(pythonError(bootdata.Decoded{Failed: s, Err: err}))
				continue
			}
			content = out
		}
		mode, ok := octal(f.Permissions, 0o644)
		if !ok {
			a.cloudbaseInit(logger, "WARNING", "Fail to process permissions %s, assuming 420", f.Permissions)
		}
		a.write(f.Path, content, mode)
	}
}

// pythonError is the last line of the traceback.
func pythonError(d bootdata.Decoded) string {
	if d.Failed == bootdata.StepGzip {
		return "gzip.BadGzipFile: " + d.Err.Error()
	}
	return "binascii.Error: " + d.Err.Error()
}

func octal(perm string, def os.FileMode) (os.FileMode, bool) {
	if perm == "" {
		return def, true
	}
	v, err := strconv.ParseUint(perm, 8, 32)
	if err != nil {
		return def, false
	}
	return os.FileMode(v), true
}

// write puts a file on the disk. The host file stays readable and
// writable by the runtime whatever the mode says.
func (a *Agent) write(path string, content []byte, mode os.FileMode) {
	p, err := a.Disk.HostPath(path)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(p), 0o700)
	}
	if err == nil {
		err = os.WriteFile(p, content, mode&0o700|0o600)
	}
	if err != nil {
		a.output("write_files: " + path + ": " + err.Error())
	}
}
