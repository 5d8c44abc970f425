package cli

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/quartermaster/qm/internal/codec"
)

func newCodecServerCommand(g *globals) *cobra.Command {
	var listen, origin string
	token := os.Getenv("QM_CODEC_SERVER_TOKEN")
	cmd := &cobra.Command{
		Use:   "codec-server",
		Short: "Decrypt payloads for the Temporal UI (its codec endpoint), with the keys of --payload-keys-dir",
		Long: `codec-server serves POST /decode and /encode as the Temporal UI calls them, so
that operators see the payloads that --payload-keys-dir encrypts. Point the
UI's codec endpoint at it (the UI's "Data Encoder" setting, or the server's
codec.endpoint). With QM_CODEC_SERVER_TOKEN set, a request must carry
"Authorization: Bearer <token>"; otherwise whoever reaches it reads every
history, so keep it where only those allowed do.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.payloadCodec()
			if err != nil {
				return err
			}
			if c == nil {
				return errors.New("the codec server needs the keys: --payload-keys-dir and --payload-key-id")
			}
			srv := &http.Server{Addr: listen, Handler: codec.Handler(c, origin, token), ReadHeaderTimeout: 10 * time.Second}
			g.logger.Info("serving the codec server", "address", listen, "uiOrigin", origin, "token", token != "")
			errc := make(chan error, 1)
			go func() { errc <- srv.ListenAndServe() }()
			select {
			case err := <-errc:
				return fmt.Errorf("serving the codec server on %s: %w", listen, err)
			case <-cmd.Context().Done():
				return srv.Close()
			}
		},
	}
	cmd.Flags().StringVar(&listen, "listen", ":8888", "listen address")
	cmd.Flags().StringVar(&origin, "ui-origin", envOr("QM_CODEC_SERVER_UI_ORIGIN", "http://localhost:8233"), "origin of the Temporal UI, whose browser requests it answers (env QM_CODEC_SERVER_UI_ORIGIN)")
	return cmd
}
