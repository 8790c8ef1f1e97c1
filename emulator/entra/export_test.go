package entra

// MaxVerifiedTokens is how many verified tokens a directory remembers.
const MaxVerifiedTokens = maxVerifiedTokens

// VerifiedTokens is how many verified tokens the directory remembers now.
func (d *Directory) VerifiedTokens() int {
	d.verifiedMu.Lock()
	defer d.verifiedMu.Unlock()
	return len(d.verified)
}
