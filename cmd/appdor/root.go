package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/appdor/appdor/migrations"
	"github.com/appdor/appdor/rls"
	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func run(ctx context.Context, args []string, stdout io.Writer) error {
	root := &cobra.Command{
		Use:           "appdor",
		Short:         "Appdor: a self-hosted spreadsheet-database",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	for _, s := range connSettings {
		s.register(root.PersistentFlags())
	}
	root.AddCommand(serveCmd(), migrateCmd(), realmCmd(), userCmd(), tokenCmd(), versionCmd())
	root.SetArgs(args)
	root.SetOut(stdout)
	return root.ExecuteContext(ctx)
}

func serveCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Migrate the database and serve the API and the grid",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := serverConfig(cmd)
			if err != nil {
				return err
			}
			level, err := logLevel(cmd)
			if err != nil {
				return err
			}
			gc, err := gcConfig(cmd, cgroupMemoryLimit(), os.Getenv)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level}))
			gc.apply(log)
			app, err := server.New(cmd.Context(), cfg, log)
			if err != nil {
				return explain(err)
			}
			defer app.Close()
			warnServingRole(cmd.Context(), app.Pool(), log, cfg.MigrateDatabaseURL != "")
			return app.Serve(cmd.Context())
		},
	}
	for _, s := range slices.Concat(serveSettings, gcSettings) {
		s.register(cmd.Flags())
	}
	return cmd
}

// warnServingRole logs one WARN line when the role Appdor serves as is not
// bound by row-level security: a superuser, a role with BYPASSRLS, or the
// tables' owner (who may ALTER them, and whose own policy sees every realm).
// Then isolation between realms rests on the server's queries alone.
func warnServingRole(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger, ownerURLSet bool) {
	st, err := rls.ServingRole(ctx, pool)
	if err != nil {
		log.Warn("serving_role: cannot tell whether row-level security binds the serving role", slog.String("error", err.Error()))
		return
	}
	if st.Sound() {
		return
	}
	fix := "serve as a login role that is a member of appdor_server and owns nothing (README, PostgreSQL roles)"
	if !ownerURLSet {
		fix += ", and migrate as the owner with " + sMigrateURL.env
	}
	log.Warn("serving_role: the database role "+st.Role+" "+strings.Join(st.Problems(), ", ")+
		": row-level security does not bind it, and isolation between realms rests on queries alone; "+fix,
		slog.String("role", st.Role), slog.Bool("superuser", st.Superuser), slog.Bool("bypassrls", st.BypassRLS),
		slog.Int("owned_tables", len(st.Owns)))
}

// ownerURL is the URL of the schema's owner: the migration URL, or the
// database URL when none is set. Migrations and admin commands use it.
func ownerURL(cmd *cobra.Command) (string, setting) {
	if u := str(cmd, sMigrateURL); u != "" {
		return u, sMigrateURL
	}
	return str(cmd, sDatabaseURL), sDatabaseURL
}

func migrateCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Apply, revert or show the schema's migrations"}
	open := func(cmd *cobra.Command) (*migrations.Migrator, error) {
		url, s := ownerURL(cmd)
		m, err := migrations.Open(cmd.Context(), url)
		if err != nil {
			return nil, configError(s, "cannot reach database at %s: %v", server.Redact(url), err)
		}
		return m, nil
	}
	printVersion := func(cmd *cobra.Command, m *migrations.Migrator) error {
		v, dirty, err := m.Version()
		if err != nil {
			return err
		}
		latest, err := migrations.Latest()
		if err != nil {
			return err
		}
		return printJSON(cmd, map[string]any{"version": v, "dirty": dirty, "latest": latest})
	}
	step := func(use, short string, do func(*migrations.Migrator) error) *cobra.Command {
		return &cobra.Command{
			Use: use, Short: short, Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				m, err := open(cmd)
				if err != nil {
					return err
				}
				defer m.Close()
				if err := do(m); err != nil {
					return err
				}
				return printVersion(cmd, m)
			},
		}
	}
	cmd.AddCommand(
		step("up", "Apply every pending migration", (*migrations.Migrator).Up),
		step("down", "Revert the newest migration", (*migrations.Migrator).Down),
		step("version", "Print the applied and the latest version", func(*migrations.Migrator) error { return nil }),
	)
	return cmd
}

// withTenancy opens a pool for one admin command, as the schema's owner: the
// serving role may not create realms, people or tokens, nor find a token in
// any realm by its id.
func withTenancy(cmd *cobra.Command, fn func(*tenancy.Service) error) error {
	url, s := ownerURL(cmd)
	pool, err := pgxpool.New(cmd.Context(), url)
	if err == nil {
		err = pool.Ping(cmd.Context())
	}
	if err != nil {
		return configError(s, "cannot reach database at %s: %v", server.Redact(url), err)
	}
	defer pool.Close()
	return fn(tenancy.New(pool))
}

// printJSON writes v as one line of JSON, so a script can read what an
// admin command made.
func printJSON(cmd *cobra.Command, v any) error {
	return json.NewEncoder(cmd.OutOrStdout()).Encode(v)
}

func realmCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "realm", Short: "Manage realms (tenants)"}
	cmd.AddCommand(&cobra.Command{
		Use: "create NAME", Short: "Create a realm and print it as JSON", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withTenancy(cmd, func(s *tenancy.Service) error {
				r, err := s.CreateRealm(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return printJSON(cmd, r)
			})
		},
	})
	return cmd
}

func parseID(what, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(strings.TrimSpace(s))
	if err != nil {
		return uuid.Nil, fmt.Errorf("%s %q is not an id", what, s)
	}
	return id, nil
}

func userCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "user", Short: "Manage people"}
	create := &cobra.Command{
		Use: "create", Short: "Add a person to a realm with a role and print the membership as JSON", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			realmFlag, _ := cmd.Flags().GetString("realm")
			realm, err := parseID("--realm", realmFlag)
			if err != nil {
				return err
			}
			email, _ := cmd.Flags().GetString("email")
			password, _ := cmd.Flags().GetString("password")
			roleFlag, _ := cmd.Flags().GetString("role")
			role, err := tenancy.ParseRole(roleFlag)
			if err != nil {
				return err
			}
			return withTenancy(cmd, func(s *tenancy.Service) error {
				m, err := s.CreateUser(cmd.Context(), realm, email, password, role)
				if err != nil {
					return err
				}
				return printJSON(cmd, m)
			})
		},
	}
	create.Flags().String("realm", "", "realm id")
	create.Flags().String("email", "", "email address, used to sign in")
	create.Flags().String("password", "", "password (8 to 72 characters)")
	create.Flags().String("role", "editor", "owner, editor or viewer")
	for _, f := range []string{"realm", "email", "password"} {
		_ = create.MarkFlagRequired(f)
	}
	cmd.AddCommand(create)
	return cmd
}

func tokenCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Manage API tokens"}
	create := &cobra.Command{
		Use: "create", Short: "Create an API token and print it as JSON; the secret is shown this once", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			realmFlag, _ := cmd.Flags().GetString("realm")
			realm, err := parseID("--realm", realmFlag)
			if err != nil {
				return err
			}
			email, _ := cmd.Flags().GetString("user")
			name, _ := cmd.Flags().GetString("name")
			var rpm *int
			if cmd.Flags().Changed("requests-per-minute") {
				s, _ := cmd.Flags().GetString("requests-per-minute")
				n, err := strconv.Atoi(s)
				if err != nil || n <= 0 {
					return fmt.Errorf("--requests-per-minute %q is not a positive number", s)
				}
				rpm = &n
			}
			return withTenancy(cmd, func(s *tenancy.Service) error {
				t, secret, err := s.CreateToken(cmd.Context(), realm, email, name, rpm)
				if err != nil {
					return err
				}
				return printJSON(cmd, struct {
					tenancy.Token
					Secret string `json:"token"`
				}{t, secret})
			})
		},
	}
	create.Flags().String("realm", "", "realm id")
	create.Flags().String("user", "", "email of the member the token acts as")
	create.Flags().String("name", "", "a name that says what the token is for")
	create.Flags().String("requests-per-minute", "", "the token's ceiling (none when absent)")
	for _, f := range []string{"realm", "user", "name"} {
		_ = create.MarkFlagRequired(f)
	}
	revoke := &cobra.Command{
		Use: "revoke ID", Short: "Revoke a token and print it as JSON", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID("token", args[0])
			if err != nil {
				return err
			}
			return withTenancy(cmd, func(s *tenancy.Service) error {
				t, err := s.RevokeToken(cmd.Context(), id)
				if err != nil {
					return err
				}
				return printJSON(cmd, t)
			})
		},
	}
	cmd.AddCommand(create, revoke)
	return cmd
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use: "version", Short: "Print the version as JSON", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			latest, err := migrations.Latest()
			if err != nil {
				return err
			}
			return printJSON(cmd, map[string]any{"version": version, "schema": latest})
		},
	}
}
