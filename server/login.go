package server

import (
	"log/slog"

	"github.com/appdor/appdor/limiter"
	"github.com/appdor/appdor/tenancy"
)

// loginScreen is the sign-in handler's LoginScreen: the rate limiter's
// ceilings on attempts per client address and per account, checked before
// any password. nil (nothing screened) when the limiter is off or both
// ceilings are; the start log says which.
func (a *App) loginScreen() tenancy.LoginScreen {
	perAddress, perAccount := 0, 0
	if a.limiter != nil {
		perAddress, perAccount = a.limiter.LoginLimits()
	}
	if perAddress == 0 {
		a.log.Warn(limiter.LoginAddressFlag+"=off: sign-in attempts are not limited per client address",
			slog.String("flag", limiter.LoginAddressFlag))
	}
	if perAccount == 0 {
		a.log.Warn(limiter.LoginAccountFlag+"=off: sign-in attempts are not limited per account",
			slog.String("flag", limiter.LoginAccountFlag))
	}
	if perAddress == 0 && perAccount == 0 {
		return nil
	}
	a.log.Info("sign-in attempts limited per client address and per account",
		slog.Int("per_address_per_minute", perAddress), slog.Int("per_account_per_minute", perAccount))
	return a.limiter.ScreenLogin
}

// orDefault is a ceiling as configured: 0 for def, negative for off (0).
func orDefault(n, def int) int {
	switch {
	case n == 0:
		return def
	case n < 0:
		return 0
	}
	return n
}
