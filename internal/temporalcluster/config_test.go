package temporalcluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

func TestServerConfig(t *testing.T) {
	svc := map[string]ports{
		"history": {GRPC: 21001, Membership: 21002}, "matching": {GRPC: 21003, Membership: 21004},
		"frontend": {GRPC: 21005, Membership: 21006, HTTP: 21007}, "worker": {GRPC: 21008, Membership: 21009},
	}
	dir := t.TempDir()
	path, err := writeYAML(dir, "config.yaml", serverConfig(25432, 4, svc, "/dc.yaml"))
	require.NoError(t, err)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var cfg struct {
		Persistence struct {
			DefaultStore, VisibilityStore string
			NumHistoryShards              int
			Datastores                    map[string]struct {
				SQL struct{ PluginName, DatabaseName, ConnectAddr string }
			}
		}
		Services map[string]struct {
			RPC struct{ GRPCPort, MembershipPort, HTTPPort int }
		}
		ClusterMetadata struct {
			ClusterInformation map[string]struct{ RPCAddress string }
		}
		DynamicConfigClient struct{ Filepath string }
	}
	require.NoError(t, yaml.Unmarshal(raw, &cfg))
	assert.Equal(t, 4, cfg.Persistence.NumHistoryShards)
	for name, db := range map[string]string{cfg.Persistence.DefaultStore: dbDefault, cfg.Persistence.VisibilityStore: dbVisibility} {
		store := cfg.Persistence.Datastores[name].SQL
		assert.Equal(t, "postgres12", store.PluginName, name)
		assert.Equal(t, db, store.DatabaseName, name)
		assert.Equal(t, "127.0.0.1:25432", store.ConnectAddr, name)
	}
	require.Len(t, cfg.Services, 4)
	for name, p := range svc {
		assert.Equal(t, p.GRPC, cfg.Services[name].RPC.GRPCPort, name)
		assert.Equal(t, p.Membership, cfg.Services[name].RPC.MembershipPort, name)
		assert.Equal(t, p.HTTP, cfg.Services[name].RPC.HTTPPort, name)
	}
	assert.Equal(t, "127.0.0.1:21005", cfg.ClusterMetadata.ClusterInformation["active"].RPCAddress, "the frontend")
	assert.Equal(t, "/dc.yaml", cfg.DynamicConfigClient.Filepath)

	dc, err := writeYAML(dir, "dc.yaml", dynamicConfig(4, map[string]any{"limit.historyCount.suggestContinueAsNew": 100}))
	require.NoError(t, err)
	raw, err = os.ReadFile(dc)
	require.NoError(t, err)
	assert.YAMLEq(t, `
limit.historyCount.suggestContinueAsNew: [{value: 100}]
frontend.enableCancelWorkerPollsOnShutdown: [{value: true}]
system.enableActivityEagerExecution: [{value: true}]
matching.enableFairness: [{value: true}]
matching.numTaskqueueReadPartitions: [{value: 4}]
matching.numTaskqueueWritePartitions: [{value: 4}]
`, string(raw))
	assert.Equal(t, filepath.Join(dir, "dc.yaml"), dc)
}
