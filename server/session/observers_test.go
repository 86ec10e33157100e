package session

import (
	"fmt"
	"reflect"
	"testing"

	"rtgate/frames"
	"rtgate/server/protocol"
	"rtgate/server/usage"
)

// TestChooseObservers: which observers read a session's upstream events,
// by its kind, as open sets the kind's state (info.live for GPT-Live and a
// fork, info.flights for a Realtime conversation, info.resume with
// continuity), and which protocol's turn marks its turns read.
func TestChooseObservers(t *testing.T) {
	flights := func(i *sessionInfo) { i.flights = &usage.Flights{} }
	keep := func(i *sessionInfo) { i.resume = &resumeArgs{} }
	live := func(i *sessionInfo) { i.live = &liveState{} }
	sideband := func(i *sessionInfo) { i.kind = kindLiveSideband }
	for _, tc := range []struct {
		kind  string
		set   []func(*sessionInfo)
		want  []string
		proto protocol.Protocol
	}{
		{"Realtime conversation", []func(*sessionInfo){flights}, []string{"realtimeUsage", "flightsWatch", "turnsWatch"}, protocol.Realtime{}},
		{"Realtime conversation with continuity", []func(*sessionInfo){flights, keep},
			[]string{"realtimeUsage", "flightsWatch", "turnsWatch", "realtimeKeep"}, protocol.Realtime{}},
		{"Realtime translation", nil, []string{"realtimeUsage", "turnsWatch"}, protocol.Realtime{}},
		{"Realtime transcription", nil, []string{"realtimeUsage", "turnsWatch"}, protocol.Realtime{}},
		{"Realtime call sideband", nil, []string{"realtimeUsage", "turnsWatch"}, protocol.Realtime{}},
		{"GPT-Live sideband", []func(*sessionInfo){sideband}, []string{"realtimeUsage", "turnsWatch"}, protocol.Realtime{}},
		{"GPT-Live", []func(*sessionInfo){live}, []string{"liveUsage", "turnsWatch"}, protocol.Live{}},
		{"GPT-Live with continuity", []func(*sessionInfo){live, keep}, []string{"liveUsage", "turnsWatch", "liveKeep"}, protocol.Live{}},
		{"GPT-Live fork", []func(*sessionInfo){live}, []string{"liveUsage", "turnsWatch"}, protocol.Live{}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			info := &sessionInfo{}
			for _, set := range tc.set {
				set(info)
			}
			w := &setupWatch{sessionInfo: info, mgr: &Manager{}}
			w.chooseObservers()
			var got []string
			for _, o := range w.obs[:w.nobs] {
				got = append(got, reflect.TypeOf(o).Elem().Name())
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("observers %v, want %v", got, tc.want)
			}
			if w.turnProto != tc.proto {
				t.Errorf("turn marks of %T, want %T", w.turnProto, tc.proto)
			}
		})
	}
}

// TestWatchAudioDeltaDoesNotAllocate: the frame most of a voice session's
// upstream traffic is, an output audio delta, costs the watch no
// allocation (it is wanted by no observer; its type is read once).
func TestWatchAudioDeltaDoesNotAllocate(t *testing.T) {
	seq := realtimeTurnEvents()
	info := &sessionInfo{flights: &usage.Flights{Relayed: func() uint64 { return 0 }, FromClient: func() uint64 { return 0 },
		Cancel: protocol.Realtime{}.Cancel}, resume: &resumeArgs{}}
	w := &setupWatch{sessionInfo: info, mgr: &Manager{}, seen: true, capSeen: true}
	w.chooseObservers()
	s := frames.NewScanner(frames.UpstreamSide, 0)
	s.SetInspector(w)
	src := frames.NewByteSource(nil)
	for _, f := range seq[:6] { // the turn up to its response.created: the deltas' response is open
		src.Reset(f)
		if _, err := s.Forward(src, nil); err != nil {
			t.Fatal(err)
		}
	}
	delta := seq[6]
	if allocs := testing.AllocsPerRun(100, func() {
		src.Reset(delta)
		if _, err := s.Forward(src, nil); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("%v allocations per audio delta, want 0", allocs)
	}
}
