package trace

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestText(t *testing.T) {
	now := time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)
	root := Node{Kind: "SFServiceInstance", Namespace: "shop", Name: "db", State: "failed", Detail: "update failed: no",
		Runs: []Run{{WorkflowID: "sfserviceinstance/shop/db", RunID: "r2", Type: "Update", Status: "COMPLETED", Started: now.Add(-90 * time.Second),
			Failure: "update failed: no\nsecond line"}},
		Children: []Node{
			{Kind: "ConfigMap", Namespace: "shop", Name: "db-db", State: "missing"},
			{Kind: "SFServiceBinding", Namespace: "shop", Name: "app", State: "succeeded", Children: []Node{
				{Kind: "ServiceBindingUsage", Namespace: "shop", Name: "u", State: "Ready=True", Detail: "into Deployment web"}}},
		}}
	var b strings.Builder
	Text(&b, root, now)
	assert.Equal(t, `SFServiceInstance shop/db  [failed]  update failed: no
    run Update completed, r2, started 1m30s ago (sfserviceinstance/shop/db)
      | update failed: no
      | second line
├─ ConfigMap shop/db-db  [missing]
└─ SFServiceBinding shop/app  [succeeded]
   └─ ServiceBindingUsage shop/u  [Ready=True]  into Deployment web
`, b.String())
}

func TestCondition(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conds []metav1.Condition
		want  string
	}{
		{"none", nil, ""},
		{"Ready wins", []metav1.Condition{{Type: "Progressing", Status: "True"}, {Type: "Ready", Status: "False", Message: "waiting"}}, "Ready=False: waiting"},
		{"else the first", []metav1.Condition{{Type: "Synced", Status: "True"}}, "Synced=True"},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, condition(tc.conds)) })
	}
}

func TestObjectConditions(t *testing.T) {
	deployment := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"replicas": int64(3)}, "status": map[string]any{"readyReplicas": int64(2)}}}
	assert.Equal(t, "2 of 3 replicas ready", objectConditions(deployment))
	withConditions := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": []any{
		map[string]any{"type": "Available", "status": "True", "message": "ok"}}}}}
	assert.Equal(t, "Available=True: ok", objectConditions(withConditions))
	assert.Empty(t, objectConditions(&unstructured.Unstructured{Object: map[string]any{}}))
}
