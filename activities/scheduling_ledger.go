package activities

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LedgerName is the ConfigMap that holds, in each namespace, the
// scheduler's durable state: the last round-robin choice and what the
// instances scheduled but not yet provisioned have reserved.
const LedgerName = "qm-scheduling"

// ledgerKey is the ConfigMap's key that holds the ledger.
const ledgerKey = "ledger.json"

// ledger is the scheduler's state in a namespace.
type ledger struct {
	// Last is the cluster the last round-robin decision took.
	Last string `json:"last,omitempty"`
	// Reserved holds, by instance name, the decisions whose instances are
	// not provisioned yet: their demand is not in their cluster's pods.
	Reserved map[string]reservation `json:"reserved,omitempty"`
}

type reservation struct {
	UID     types.UID           `json:"uid"`
	Cluster string              `json:"cluster"`
	Demand  corev1.ResourceList `json:"demand,omitempty"`
	At      metav1.Time         `json:"at"`
}

// readLedger reads the namespace's ledger, an empty one if there is none.
func (s *Scheduling) readLedger(ctx context.Context, namespace string) (*corev1.ConfigMap, *ledger, error) {
	cm := &corev1.ConfigMap{}
	led := &ledger{Reserved: map[string]reservation{}}
	err := s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: LedgerName}, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: LedgerName,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "quartermaster"}}}
		return cm, led, nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading the scheduling ledger %s/%s: %w", namespace, LedgerName, err)
	}
	if raw := cm.Data[ledgerKey]; raw != "" {
		if err := json.Unmarshal([]byte(raw), led); err != nil {
			return nil, nil, fmt.Errorf("the scheduling ledger %s/%s does not parse: %w", namespace, LedgerName, err)
		}
	}
	if led.Reserved == nil {
		led.Reserved = map[string]reservation{}
	}
	return cm, led, nil
}

// writeLedger writes led if the ledger did not change since cm was read.
func (s *Scheduling) writeLedger(ctx context.Context, cm *corev1.ConfigMap, led *ledger) (bool, error) {
	raw, err := json.Marshal(led)
	if err != nil {
		return false, err
	}
	cm.Data = map[string]string{ledgerKey: string(raw)}
	if cm.ResourceVersion == "" {
		err = s.Client.Create(ctx, cm)
	} else {
		err = s.Client.Update(ctx, cm) // fails with a conflict if another wrote first
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("writing the scheduling ledger %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return true, nil
}
