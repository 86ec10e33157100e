package spend

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// bookScript adds ARGV[3] USD to a key's spend in Redis and returns the
// key's first-spend time, the current window's start (both Unix ms) and the
// window's total. KEYS[1] holds the anchor, set by the first spend of any
// instance; a window's total lives at KEYS[1]:<window start> and expires
// two windows after it starts. An amount of 0 only reads (it starts no
// window). One script, so the window and the increment agree atomically.
// (The window key is derived inside the script: fine for one Redis or a
// replica set, not for Redis Cluster slots.)
var bookScript = redis.NewScript(`
local anchor = redis.call('GET', KEYS[1])
if not anchor then
  if tonumber(ARGV[3]) <= 0 then return {'', '', '0'} end
  redis.call('SET', KEYS[1], ARGV[1])
  anchor = ARGV[1]
end
local a, now, every = tonumber(anchor), tonumber(ARGV[1]), tonumber(ARGV[2])
local ws = a
if every > 0 and now > a then ws = a + math.floor((now - a) / every) * every end
local wkey = KEYS[1] .. ':' .. string.format('%d', ws)
local total = redis.call('INCRBYFLOAT', wkey, ARGV[3])
if every > 0 then redis.call('PEXPIRE', wkey, every * 2) end
return {anchor, string.format('%d', ws), total}
`)

// Shared is the Redis every instance books spend into.
type Shared struct {
	Client *redis.Client
	Prefix string // "rtgate:"
}

func (s Shared) key(name string) string { return s.Prefix + "budget:{" + name + "}" }

// Sync pushes the spend booked here since the last Sync to Redis for every
// key in budgets, and takes back each key's cluster-wide total (spend booked
// here meanwhile stays on top of it). On error nothing is lost: what was to
// be pushed is pushed next time. A reply lost after Redis applied it would
// count that spend twice: budgets err towards refusing.
func (l *Ledger) Sync(ctx context.Context, s Shared, budgets map[string]Budget, now time.Time) error {
	type push struct {
		name   string
		amount float64
		cmd    *redis.Cmd
	}
	l.mu.Lock()
	l.shared = true
	pushes := make([]push, 0, len(budgets))
	for name, b := range budgets {
		amount := 0.0
		if a := l.current(name, b, now); a != nil {
			amount, a.pending = a.pending, 0
		}
		pushes = append(pushes, push{name: name, amount: amount})
	}
	l.mu.Unlock()
	if len(pushes) == 0 {
		return nil
	}
	pipe := s.Client.Pipeline()
	for i := range pushes {
		p := &pushes[i]
		pushes[i].cmd = bookScript.Eval(ctx, pipe, []string{s.key(p.name)},
			now.UnixMilli(), budgets[p.name].Every.Milliseconds(), strconv.FormatFloat(p.amount, 'g', -1, 64))
	}
	_, err := pipe.Exec(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	defer func() { // on any error, what is known stays that of the last good sync
		l.cut = err != nil
		l.synced = l.synced || err == nil
	}()
	for _, p := range pushes {
		reply, rerr := p.cmd.StringSlice()
		if rerr == nil && len(reply) != 3 {
			rerr = fmt.Errorf("unexpected reply %q", reply)
		}
		a := l.keys[p.name]
		if rerr != nil {
			if a != nil { // push it again next time
				a.pending += p.amount
			}
			if err == nil {
				err = rerr
			}
			continue
		}
		if reply[0] == "" { // no spend anywhere yet
			continue
		}
		anchor, err1 := strconv.ParseInt(reply[0], 10, 64)
		ws, err2 := strconv.ParseInt(reply[1], 10, 64)
		total, err3 := strconv.ParseFloat(reply[2], 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		if a == nil {
			a = &account{}
			l.keys[p.name] = a
		}
		a.Anchor, a.Window = time.UnixMilli(anchor), time.UnixMilli(ws)
		a.Spent = total + a.pending // what was booked during the round trip
		a.base = total
		a.every = budgets[p.name].Every
	}
	if err != nil {
		return fmt.Errorf("syncing budgets with Redis: %w", err)
	}
	return nil
}
