package linearizability

import (
	"errors"
	"io"
	"os"
	"path/filepath"

	"github.com/anishathalye/porcupine"
)

// ErrNothingToDraw is what [Result.Visualize] returns for a history that is
// linearizable (or undecided): porcupine draws only a failed search.
var ErrNothingToDraw = errors.New("the history is not shown as not linearizable: nothing to draw")

// Visualize writes porcupine's visualisation of a history that is not
// linearizable — the longest linearizable prefixes and where each got stuck
// — as a self-contained HTML page to w. [Check] decides; this draws.
func (r *Result) Visualize(w io.Writer) error {
	if r.search == nil {
		return ErrNothingToDraw
	}
	return porcupine.Visualize(r.search.model, r.search.info, w)
}

// WriteHTML writes [Result.Visualize]'s page into dir (created if needed) as
// <trace name>.html and returns its path; "" and no error when there is
// nothing to draw.
func (r *Result) WriteHTML(dir string) (string, error) {
	if r.search == nil {
		return "", nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, filepath.Base(r.Trace)+".html")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := r.Visualize(f); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}
