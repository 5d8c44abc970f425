package temporalcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"sigs.k8s.io/yaml"
)

// Services are Temporal's services, each run as a process of its own, in
// the order they start: history owns the shards that matching and the
// frontend route to, and Temporal's worker service needs the frontend.
var Services = []string{"history", "matching", "frontend", "worker"}

// ports are the loopback ports of one service.
type ports struct {
	GRPC, Membership, HTTP int
}

// serverConfig is temporal-server's static configuration: PostgreSQL as
// the default store and as SQL visibility, numHistoryShards shards, and
// each service on ports of its own so that they run as separate processes
// on one host, as separate pods would on several.
func serverConfig(pgPort, shards int, svc map[string]ports, dynamicConfig string) map[string]any {
	store := func(db string, conns int) map[string]any {
		return map[string]any{"sql": map[string]any{
			"pluginName": "postgres12", "databaseName": db, "connectAddr": "127.0.0.1:" + strconv.Itoa(pgPort),
			"connectProtocol": "tcp", "user": dbUser, "password": dbPassword,
			"maxConns": conns, "maxIdleConns": conns, "maxConnLifetime": "1h",
		}}
	}
	services := map[string]any{}
	for name, p := range svc {
		rpc := map[string]any{"grpcPort": p.GRPC, "membershipPort": p.Membership, "bindOnLocalHost": true}
		if p.HTTP != 0 {
			rpc["httpPort"] = p.HTTP
		}
		services[name] = map[string]any{"rpc": rpc}
	}
	frontend := "127.0.0.1:" + strconv.Itoa(svc["frontend"].GRPC)
	return map[string]any{
		"log": map[string]any{"stdout": true, "level": "warn", "format": "json"},
		"persistence": map[string]any{
			"defaultStore": "postgres-default", "visibilityStore": "postgres-visibility", "numHistoryShards": shards,
			"datastores": map[string]any{
				"postgres-default":    store(dbDefault, 20),
				"postgres-visibility": store(dbVisibility, 10),
			},
		},
		"global": map[string]any{
			"membership": map[string]any{"maxJoinDuration": "30s", "broadcastAddress": "127.0.0.1"},
		},
		"services": services,
		"clusterMetadata": map[string]any{
			"enableGlobalNamespace": false, "failoverVersionIncrement": 10,
			"masterClusterName": "active", "currentClusterName": "active",
			"clusterInformation": map[string]any{"active": map[string]any{
				"enabled": true, "initialFailoverVersion": 1, "rpcName": "frontend", "rpcAddress": frontend,
			}},
		},
		"dcRedirectionPolicy": map[string]any{"policy": "noop"},
		"dynamicConfigClient": map[string]any{"filepath": dynamicConfig, "pollInterval": "10s"},
	}
}

// dynamicConfig is the server's dynamic configuration: task queues of
// partitions read and written partitions (production's default is 4; the
// dev server uses 1), polls that the server completes when a worker shuts
// down, eager activities (a mass update's batches go to the worker that
// scheduled them, without a trip through the task queue), plus the
// caller's values.
//
// Without that completion the SDK cancels a stopping worker's polls itself,
// and a task the server hands to a poll at that instant waits out its
// timeout (temporalio/sdk-go#2199): a rolling update of the workers could
// hold a provision for a workflow task timeout. Servers from 1.31 complete
// the polls when asked to, and the SDK then leaves them to it.
func dynamicConfig(partitions int, extra map[string]any) map[string]any {
	dc := map[string]any{
		"matching.numTaskqueueReadPartitions":        []any{map[string]any{"value": partitions}},
		"matching.numTaskqueueWritePartitions":       []any{map[string]any{"value": partitions}},
		"frontend.enableCancelWorkerPollsOnShutdown": []any{map[string]any{"value": true}},
		"system.enableActivityEagerExecution":        []any{map[string]any{"value": true}},
		"matching.enableFairness":                    []any{map[string]any{"value": true}},
	}
	for k, v := range extra {
		dc[k] = []any{map[string]any{"value": v}}
	}
	return dc
}

// writeYAML writes v to dir/name and returns the path.
func writeYAML(dir, name string, v any) (string, error) {
	raw, err := yaml.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encoding %s: %w", name, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}
