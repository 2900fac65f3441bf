package limiter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

// The ceilings on sign-in attempts, both counted before the password is
// checked: per client address (an IPv6 client by its /64, as AddressKey),
// and per account, the normalised email as typed, whether or not anyone has
// it, so that guessing one person's password from many addresses gets no more
// tries than from one.
const (
	ScopeLoginAddress Scope = "login_address"
	ScopeLoginAccount Scope = "login_account"
)

// Defaults of the sign-in ceilings, in attempts per minute (a burst of that
// many, then one per 60/limit seconds). Every attempt is charged, a
// successful one too: a person signs in once in a session of two weeks. Ten
// per account is room for typos and a few browsers, and holds a guesser to
// 14,400 tries a day instead of the ~20 a second one replica's password
// checks allow; thirty per address leaves room for an office behind one
// address.
const (
	DefaultLoginAddressPerMinute = 30
	DefaultLoginAccountPerMinute = 10
)

// LoginAddressFlag and LoginAccountFlag name the settings of the sign-in
// ceilings, as the command line spells them, in the log line of their
// refusal episodes.
const (
	LoginAddressFlag = "login-address-attempts-per-minute"
	LoginAccountFlag = "login-account-attempts-per-minute"
)

// LoginAddressKey names the sign-in quota key of a client address.
func LoginAddressKey(addr string) string { return "appdor:quota:login:addr:{" + addressOf(addr) + "}" }

// LoginAccountKey names the sign-in quota key of an account. The key holds a
// hash of it, not the email: Redis needs no one's address.
func LoginAccountKey(account string) string {
	return "appdor:quota:login:account:{" + accountHash(account) + "}"
}

func accountHash(account string) string {
	h := sha256.Sum256([]byte(account))
	return hex.EncodeToString(h[:16])
}

// LoginLimits are the sign-in ceilings per minute, per address and per
// account; 0 for one that is off.
func (l *Limiter) LoginLimits() (perAddress, perAccount int) { return l.loginAddress, l.loginAccount }

// AllowLogin decides one sign-in attempt on account from the client at addr:
// first against the address's ceiling, then the account's, one Redis round
// trip each (the keys have hash tags of their own, as Redis Cluster wants),
// the same script and the same fail-open rule as Allow. An attempt the
// address's ceiling refuses spends nothing of the account's allowance. The
// first refusal of an episode is logged with the address (and the account's
// key, never the email or a password); the metric has neither as a label.
func (l *Limiter) AllowLogin(ctx context.Context, addr, account string) Decision {
	if l.loginAddress > 0 {
		d, ok := l.decideOne(ctx, LoginAddressKey(addr), ScopeLoginAddress, l.loginAddress, argsOf(l.loginAddress))
		if ok && !d.Allowed {
			if d.FirstRefusal {
				l.logEpisode(refusal{scope: ScopeLoginAddress, limit: l.loginAddress, address: addressOf(addr)})
			}
			return d
		}
	}
	if l.loginAccount > 0 {
		d, ok := l.decideOne(ctx, LoginAccountKey(account), ScopeLoginAccount, l.loginAccount, argsOf(l.loginAccount))
		if ok && !d.Allowed {
			if d.FirstRefusal {
				l.logEpisode(refusal{scope: ScopeLoginAccount, limit: l.loginAccount, address: addressOf(addr),
					account: accountHash(account)})
			}
			return d
		}
	}
	return Decision{Allowed: true, Scope: ScopeLoginAccount}
}

// ScreenLogin is AllowLogin as an error: nil when allowed, else the
// rate_limited error (429, Retry-After).
func (l *Limiter) ScreenLogin(ctx context.Context, addr, account string) error {
	d := l.AllowLogin(ctx, addr, account)
	if d.Allowed {
		return nil
	}
	return refusalError(d)
}
