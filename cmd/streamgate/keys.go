package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/streamgate/streamgate/cmd/internal/cli"
	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/gateway/store"
)

// keysCommand is `streamgate keys`: API keys in Redis or in a keys file,
// the stores a gateway reads them from.
func keysCommand() *cli.Command {
	return &cli.Command{
		Name:    "keys",
		Purpose: "create, list and revoke the API keys gateways ask for (in Redis, or a keys file)",
		About: `A gateway started with --redis or --keys-file answers only requests
with a key: "Authorization: Bearer KEY" (on /v1/ws also the subprotocol
streamgate.key.KEY). Keys are stored as SHA-256 hashes: the secret is
printed once, by create, alone on stdout.`,
		Examples: []cli.Example{
			{Comment: "A key for 60 requests and 20000 tokens a minute, 4 streams at once; the secret into a variable", Line: "KEY=$(streamgate keys create --redis redis://127.0.0.1:6379/0 --name alice --rpm 60 --tpm 20000 --concurrency 4)"},
			{Comment: "Who has keys, with their limits (never their secrets)", Line: "streamgate keys list --redis redis://127.0.0.1:6379/0"},
		},
		Commands: []*cli.Command{{
			Name:    "create",
			Purpose: "make a key; its secret goes alone to stdout, its details to stderr",
			Examples: []cli.Example{
				{Line: "streamgate keys create --redis redis://127.0.0.1:6379/0 --name alice --rpm 60"},
				{Comment: "Only stories15m, for 30 days", Line: "streamgate keys create --keys-file keys.json --name demo --allowed-models stories15m --expires 30d"},
			},
			Setup: func(fs *cli.FlagSet) cli.Run {
				ks := keyStoreFlags(fs)
				var name, models, expires string
				var storage int64
				var l store.Limit
				fs.Group("Key")
				fs.StringVar(&name, "name", "", "the key's `name`, unique (letters, digits, '.', '_', '-'); list and revoke use it")
				fs.IntVar(&l.RPM, "rpm", 0, "requests per minute the key may make, on all replicas together; 0: no limit")
				fs.IntVar(&l.TPM, "tpm", 0, "tokens per minute (prompt plus completion, reserved from max_tokens and settled from the model's count); 0: no limit")
				fs.IntVar(&l.Concurrency, "concurrency", 0, "inference requests the key may have in flight at once; 0: no limit")
				fs.StringVar(&models, "allowed-models", "", "the `models` the key may use, comma-separated; empty: all (not --models, whose STREAMGATE_MODELS is serve's model directory)")
				fs.Int64Var(&storage, "storage", 0, "`bytes` of stored responses the key may keep; 0: the gateway's --key-storage")
				fs.StringVar(&expires, "expires", "", "how long the key works, as a `duration` (720h, 30d); empty: until revoked")
				return func(ctx context.Context, _ []string, stdout, stderr io.Writer) error {
					if name == "" {
						return errors.New("keys create: --name is required")
					}
					if l.RPM < 0 || l.TPM < 0 || l.Concurrency < 0 || storage < 0 {
						return errors.New("keys create: --rpm, --tpm, --concurrency and --storage must not be negative")
					}
					now := time.Now()
					k, secret, err := store.NewKey(name, now)
					if err != nil {
						return err
					}
					k.Limit, k.Models, k.Storage = l, stack.SplitList(models), storage
					if expires != "" {
						d, err := parseDays(expires)
						if err != nil || d <= 0 {
							return fmt.Errorf("keys create: --expires %q: want a positive duration such as 720h or 30d", expires)
						}
						k.Expires = now.Add(d).UTC()
					}
					s, closeStore, err := ks.open()
					if err != nil {
						return err
					}
					defer closeStore()
					if err := s.CreateKey(ctx, k); err != nil {
						return err
					}
					fmt.Fprintf(stderr, "created key %s (%s): %s; the secret below is shown only now\n", k.Name, k.ID, describeKey(k))
					_, err = fmt.Fprintln(stdout, secret)
					return err
				}
			},
		}, {
			Name:    "list",
			Purpose: "the keys, their limits and models (never their secrets)",
			Examples: []cli.Example{
				{Line: "streamgate keys list --redis redis://127.0.0.1:6379/0"},
				{Comment: "The keys of a single gateway started with --keys-file keys.json", Line: "streamgate keys list --keys-file keys.json"},
			},
			Setup: func(fs *cli.FlagSet) cli.Run {
				ks := keyStoreFlags(fs)
				return func(ctx context.Context, _ []string, stdout, _ io.Writer) error {
					s, closeStore, err := ks.open()
					if err != nil {
						return err
					}
					defer closeStore()
					keys, err := s.ListKeys(ctx)
					if err != nil {
						return err
					}
					return listKeys(stdout, keys)
				}
			},
		}, {
			Name:    "revoke",
			Purpose: "delete a key by name: the gateways refuse it from the next request on",
			Args:    "NAME",
			Examples: []cli.Example{
				{Line: "streamgate keys revoke --redis redis://127.0.0.1:6379/0 alice"},
				{Comment: "From the keys file of a single gateway (it rereads the file at once)", Line: "streamgate keys revoke --keys-file keys.json demo"},
			},
			Setup: func(fs *cli.FlagSet) cli.Run {
				ks := keyStoreFlags(fs)
				return func(ctx context.Context, args []string, _, stderr io.Writer) error {
					if len(args) != 1 {
						return errors.New("keys revoke: name one key (see 'streamgate keys list')")
					}
					s, closeStore, err := ks.open()
					if err != nil {
						return err
					}
					defer closeStore()
					if err := s.RevokeKey(ctx, args[0]); err != nil {
						return err
					}
					fmt.Fprintf(stderr, "revoked key %s\n", args[0])
					return nil
				}
			},
		}},
	}
}

// keyStore is where `streamgate keys` keeps keys: --redis or --keys-file.
type keyStore struct{ redis, file string }

func keyStoreFlags(fs *cli.FlagSet) *keyStore {
	ks := &keyStore{}
	stack.RegisterKeyStore(fs, &ks.redis, &ks.file)
	return ks
}

func (ks *keyStore) open() (store.Keys, func(), error) {
	switch {
	case ks.redis != "" && ks.file != "":
		return nil, nil, errors.New("--redis and --keys-file: give one, the store the gateways read")
	case ks.redis != "":
		s, err := store.Open(ks.redis)
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	case ks.file != "":
		f, err := store.OpenKeysFile(ks.file)
		if err != nil {
			return nil, nil, err
		}
		return f, func() {}, nil
	}
	return nil, nil, errors.New("where are the keys? give --redis URL (gateways with --redis) or --keys-file FILE (a gateway with --keys-file)")
}

// parseDays is time.ParseDuration that also takes whole days ("30d").
func parseDays(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil {
			return 0, err
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

func limitText(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func describeKey(k store.Key) string {
	models := "all models"
	if len(k.Models) > 0 {
		models = "models " + strings.Join(k.Models, ",")
	}
	expires := "no expiry"
	if !k.Expires.IsZero() {
		expires = "expires " + k.Expires.Format(time.RFC3339)
	}
	return fmt.Sprintf("rpm %s, tpm %s, concurrency %s, %s, %s",
		limitText(k.RPM), limitText(k.TPM), limitText(k.Concurrency), models, expires)
}

func listKeys(w io.Writer, keys []store.Key) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tRPM\tTPM\tCONCURRENCY\tMODELS\tCREATED\tEXPIRES")
	now := time.Now()
	for _, k := range keys {
		models := "all"
		if len(k.Models) > 0 {
			models = strings.Join(k.Models, ",")
		}
		expires := "never"
		if !k.Expires.IsZero() {
			expires = k.Expires.Format(time.RFC3339)
			if k.Expired(now) {
				expires += " (expired)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.Name, k.ID, limitText(k.RPM), limitText(k.TPM),
			limitText(k.Concurrency), models, k.Created.Format(time.RFC3339), expires)
	}
	return tw.Flush()
}
