package modelcache

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress counts a download's bytes as its writer and shows them: on a
// terminal one bar redrawn in place at most ten times a second, otherwise
// a plain line each time another tenth of the file has arrived (each
// plainStep bytes when the size is unknown). It is used by one goroutine.
type progress struct {
	w        io.Writer
	terminal bool
	name     string
	total    int64 // -1: unknown
	done     int64
	resumed  int64 // bytes there before this download began

	start    time.Time
	lastDraw time.Time
	nextLine int64 // plain mode: print when done reaches it
	printed  int64 // plain mode: done at the last line
}

const (
	barWidth  = 30
	plainStep = 16 << 20
	redraw    = 100 * time.Millisecond
)

func newProgress(w io.Writer, terminal bool, name string, have, total int64) *progress {
	p := &progress{w: w, terminal: terminal, name: name, total: total, done: have, resumed: have, printed: have, start: time.Now()}
	p.nextLine = p.nextStep()
	return p
}

// nextStep is the next count at which plain mode prints a line.
func (p *progress) nextStep() int64 {
	if p.total <= 0 {
		return (p.done/plainStep + 1) * plainStep
	}
	tenth := (p.done*10/p.total + 1)
	return (tenth*p.total + 9) / 10
}

func (p *progress) Write(b []byte) (int, error) {
	p.done += int64(len(b))
	if p.terminal {
		if now := time.Now(); now.Sub(p.lastDraw) >= redraw {
			p.lastDraw = now
			p.draw()
		}
		return len(b), nil
	}
	if p.done >= p.nextLine {
		p.line()
	}
	return len(b), nil
}

func (p *progress) line() {
	fmt.Fprintf(p.w, "%s: %s\n", p.name, p.amount())
	p.printed, p.nextLine = p.done, p.nextStep()
}

// finish shows where the download ended, unless that is already shown.
func (p *progress) finish() {
	if p.terminal {
		p.draw()
		fmt.Fprintln(p.w)
		return
	}
	if p.done != p.printed {
		p.line()
	}
}

// amount is "45% (27.4 MB of 60.8 MB)", or "27.4 MB" for an unknown size.
func (p *progress) amount() string {
	if p.total <= 0 {
		return formatBytes(p.done)
	}
	return fmt.Sprintf("%d%% (%s of %s)", p.done*100/p.total, formatBytes(p.done), formatBytes(p.total))
}

func (p *progress) draw() {
	var bar string
	if p.total > 0 {
		fill := int(p.done * barWidth / p.total)
		bar = "[" + strings.Repeat("=", fill) + strings.Repeat(" ", barWidth-fill) + "] "
	}
	rate := ""
	if secs := time.Since(p.start).Seconds(); secs > 0 {
		rate = "  " + formatBytes(int64(float64(p.done-p.resumed)/secs)) + "/s"
	}
	// \r returns to the line's start; \x1b[K clears what a longer earlier
	// line left.
	fmt.Fprintf(p.w, "\r%s %s%s%s\x1b[K", p.name, bar, p.amount(), rate)
}

// formatBytes is n in B, kB, MB or GB (powers of 1000, one decimal).
func formatBytes(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n < 1000_000:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	case n < 1000_000_000:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1f GB", float64(n)/1e9)
}

// formatSize is formatBytes, or "an unknown size" for -1.
func formatSize(n int64) string {
	if n < 0 {
		return "an unknown size"
	}
	return formatBytes(n)
}
