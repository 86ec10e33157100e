// Package every runs a periodic job: the server's watchdog, its budget
// saver and the admin status sampler share it.
package every

import (
	"context"
	"time"
)

// Tick calls f with the time of each tick of a d ticker until ctx ends.
func Tick(ctx context.Context, d time.Duration, f func(now time.Time)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			f(now)
		}
	}
}
