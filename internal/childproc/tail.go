package childproc

import (
	"strings"
	"sync"
)

// Tail keeps the end of a server's output for the error of a start that
// fails: a server that exits as it starts says why there, and a caller
// that discards the output would otherwise never see it.
type Tail struct {
	mu  sync.Mutex
	buf []byte
}

// TailSize is how much of the output a Tail keeps.
const TailSize = 2048

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if extra := len(t.buf) - TailSize; extra > 0 {
		t.buf = append(t.buf[:0], t.buf[extra:]...)
	}
	return len(p), nil
}

// Quote is the output's end, introduced as the named server's, for an
// error to end with; empty if the server printed nothing.
func (t *Tail) Quote(server string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := strings.TrimSpace(string(t.buf))
	if out == "" {
		return ""
	}
	return "\n--- the end of " + server + "'s output:\n" + out
}
