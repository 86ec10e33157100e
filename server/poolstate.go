package server

import "rtgate/upstream"

// poolMemory is where the warm pool remembers demand across restarts: the
// REALTIME_POOL_STATE file, and with REDIS_URL the instances' shared peaks
// (upstream/memory.go); nil for neither.
func (s *Server) poolMemory() upstream.DemandMemory {
	var ms upstream.Memories
	if s.cfg.PoolState != "" {
		ms = append(ms, upstream.FileMemory{Path: s.cfg.PoolState})
	}
	if s.store != nil {
		ms = append(ms, &upstream.RedisMemory{Client: s.store.Client, Instance: s.store.Instance,
			InstancesKey: s.cluster.instancesKey(), Prefix: s.store.Key("pool", "demand") + ":"})
	}
	if len(ms) == 0 {
		return nil
	}
	return ms
}
