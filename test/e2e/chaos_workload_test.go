package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// workload is one instance's life in the chaos run: provision, bind, an
// update of its parameters or its plan (some), unbind (some), deprovision
// (half); through OSB or through the Kubernetes API. Each step waits for
// the one before to end, as a user would.
type workload struct {
	kube         ctrlclient.Client
	osb          *osbClient
	e            *expectation
	deadline     time.Time
	small, large string
}

func (w *workload) run(i int) error {
	steps := []func() error{w.provision, w.bind}
	switch i % 4 {
	case 0:
		steps = append(steps, func() error { return w.update(w.small, `{"size": "m"}`) })
	case 1:
		steps = append(steps, func() error { return w.update(w.large, "") })
	}
	if i%3 == 0 {
		steps = append(steps, w.unbind)
	}
	if (i/2)%2 == 0 {
		steps = append(steps, w.deprovision)
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("%s: %w", w.e.name, err)
		}
	}
	return nil
}

func (w *workload) instPath() string { return "/v2/service_instances/" + w.e.name }

func (w *workload) provision() error {
	w.e.plan = w.small
	if w.e.osb {
		status, body := w.osb.do("provision", http.MethodPut, w.instPath()+"?accepts_incomplete=true",
			fmt.Sprintf(`{"service_id": "chaos-svc", "plan_id": %q, "organization_guid": "o", "space_guid": "s"}`, w.small), w.deadline)
		if status != http.StatusAccepted && status != http.StatusOK && status != http.StatusCreated {
			return fmt.Errorf("provision answered %d: %s", status, body)
		}
		w.e.provisionAcked = true
		return w.poll("provision", w.instPath()+"/last_operation?operation=provision", http.StatusOK)
	}
	inst := &osbv1alpha1.SFServiceInstance{
		ObjectMeta: metav1.ObjectMeta{Name: w.e.name, Namespace: chaosNamespace},
		Spec:       osbv1alpha1.SFServiceInstanceSpec{InstanceID: w.e.name, ServiceID: "chaos-svc", PlanID: w.small},
	}
	if err := w.retry(func(ctx context.Context) error { return ignoreExists(w.kube.Create(ctx, inst)) }); err != nil {
		return err
	}
	return w.waitInstance(1)
}

func (w *workload) bind() error {
	if w.e.osb {
		path := w.instPath() + "/service_bindings/" + w.e.binding
		status, body := w.osb.do("bind", http.MethodPut, path+"?accepts_incomplete=true",
			fmt.Sprintf(`{"service_id": "chaos-svc", "plan_id": %q}`, w.small), w.deadline)
		switch status {
		case http.StatusOK, http.StatusCreated:
			return nil
		case http.StatusAccepted:
			return w.poll("bind", path+"/last_operation?operation=bind", http.StatusOK)
		}
		return fmt.Errorf("bind answered %d: %s", status, body)
	}
	b := &osbv1alpha1.SFServiceBinding{
		ObjectMeta: metav1.ObjectMeta{Name: w.e.binding, Namespace: chaosNamespace},
		Spec:       osbv1alpha1.SFServiceBindingSpec{ID: w.e.binding, InstanceID: w.e.name, ServiceID: "chaos-svc", PlanID: w.small},
	}
	if err := w.retry(func(ctx context.Context) error { return ignoreExists(w.kube.Create(ctx, b)) }); err != nil {
		return err
	}
	return w.wait("binding "+w.e.binding, func(ctx context.Context) (bool, error) {
		err := w.kube.Get(ctx, ctrlclient.ObjectKeyFromObject(b), b)
		return err == nil && b.Status.State == osbv1alpha1.StateSucceeded, nil
	})
}

// update changes the plan to planID, or the parameters to params.
func (w *workload) update(planID, params string) error {
	gen := 2 + w.e.updates
	if w.e.osb {
		body := fmt.Sprintf(`{"service_id": "chaos-svc", "plan_id": %q}`, planID)
		if params != "" {
			body = fmt.Sprintf(`{"service_id": "chaos-svc", "plan_id": %q, "parameters": %s}`, planID, params)
		}
		status, got := w.osb.do("update", http.MethodPatch, w.instPath()+"?accepts_incomplete=true", body, w.deadline)
		if status != http.StatusAccepted && status != http.StatusOK {
			return fmt.Errorf("update answered %d: %s", status, got)
		}
		w.e.updates++
		w.e.plan = planID
		var op struct {
			Operation string `json:"operation"`
		}
		_ = json.Unmarshal([]byte(got), &op)
		return w.poll("update", w.instPath()+"/last_operation?operation="+op.Operation, http.StatusOK)
	}
	err := w.retry(func(ctx context.Context) error {
		var inst osbv1alpha1.SFServiceInstance
		if err := w.kube.Get(ctx, ctrlclient.ObjectKey{Namespace: chaosNamespace, Name: w.e.name}, &inst); err != nil {
			return err
		}
		if inst.Generation >= gen {
			return nil // a retry of an update that went through
		}
		inst.Spec.PlanID = planID
		if params != "" {
			inst.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(params)}
		}
		return w.kube.Update(ctx, &inst)
	})
	if err != nil {
		return err
	}
	w.e.updates++
	w.e.plan = planID
	return w.waitInstance(gen)
}

func (w *workload) unbind() error {
	w.e.unbound = true
	if w.e.osb {
		path := w.instPath() + "/service_bindings/" + w.e.binding
		status, body := w.osb.do("unbind", http.MethodDelete, fmt.Sprintf("%s?service_id=chaos-svc&plan_id=%s&accepts_incomplete=true", path, w.e.plan), "", w.deadline)
		switch status {
		case http.StatusOK, http.StatusGone:
			return nil
		case http.StatusAccepted:
			return w.poll("unbind", path+"/last_operation?operation=unbind", http.StatusGone)
		}
		return fmt.Errorf("unbind answered %d: %s", status, body)
	}
	b := &osbv1alpha1.SFServiceBinding{ObjectMeta: metav1.ObjectMeta{Name: w.e.binding, Namespace: chaosNamespace}}
	return w.gone(b)
}

func (w *workload) deprovision() error {
	w.e.deleted = true
	if w.e.osb {
		status, body := w.osb.do("deprovision", http.MethodDelete, w.instPath()+"?service_id=chaos-svc&plan_id="+w.e.plan+"&accepts_incomplete=true", "", w.deadline)
		switch status {
		case http.StatusOK, http.StatusGone:
			return nil
		case http.StatusAccepted:
			return w.poll("deprovision", w.instPath()+"/last_operation?operation=deprovision", http.StatusGone)
		}
		return fmt.Errorf("deprovision answered %d: %s", status, body)
	}
	// A binding still there goes with the instance, as the annotation asks
	// (without it the deprovision would wait for its user to remove it).
	inst := &osbv1alpha1.SFServiceInstance{ObjectMeta: metav1.ObjectMeta{Name: w.e.name, Namespace: chaosNamespace}}
	if !w.e.unbound {
		err := w.retry(func(ctx context.Context) error {
			patch := fmt.Sprintf(`{"metadata": {"annotations": {%q: "true"}}}`, osbv1alpha1.DeprovisionInUseAnnotation)
			return ctrlclient.IgnoreNotFound(w.kube.Patch(ctx, inst.DeepCopy(), ctrlclient.RawPatch(types.MergePatchType, []byte(patch))))
		})
		if err != nil {
			return err
		}
	}
	return w.gone(inst)
}

// poll follows last_operation until the operation ends: done is the code
// of its end (200 with succeeded, or 410 for a removal).
func (w *workload) poll(op, path string, done int) error {
	for time.Now().Before(w.deadline) {
		status, body := w.osb.do("last_operation", http.MethodGet, path, "", w.deadline)
		var lo struct {
			State       string `json:"state"`
			Description string `json:"description"`
		}
		_ = json.Unmarshal([]byte(body), &lo)
		if status == http.StatusOK {
			w.e.states[op] = append(w.e.states[op], lo.State)
		}
		switch {
		case status == done && (done == http.StatusGone || lo.State == "succeeded"):
			return nil
		case lo.State == "failed":
			return fmt.Errorf("%s failed: %s", op, lo.Description)
		}
		time.Sleep(250 * time.Millisecond) // a platform's poll pace
	}
	return fmt.Errorf("%s did not end by the deadline", op)
}

func (w *workload) waitInstance(gen int64) error {
	return w.wait(fmt.Sprintf("instance %s at generation %d", w.e.name, gen), func(ctx context.Context) (bool, error) {
		var inst osbv1alpha1.SFServiceInstance
		err := w.kube.Get(ctx, ctrlclient.ObjectKey{Namespace: chaosNamespace, Name: w.e.name}, &inst)
		if err == nil && inst.Status.State == osbv1alpha1.StateFailed && inst.Status.ObservedGeneration >= gen {
			return false, fmt.Errorf("failed: %s", inst.Status.Description)
		}
		return err == nil && testenv.Succeeded(gen)(&inst), nil
	})
}

// gone deletes obj and waits until it is gone.
func (w *workload) gone(obj ctrlclient.Object) error {
	if err := w.retry(func(ctx context.Context) error { return ctrlclient.IgnoreNotFound(w.kube.Delete(ctx, obj)) }); err != nil {
		return err
	}
	return w.wait(obj.GetName()+" gone", func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(w.kube.Get(ctx, ctrlclient.ObjectKeyFromObject(obj), obj)), nil
	})
}

// retry repeats a Kubernetes call while the API server is away.
func (w *workload) retry(call func(context.Context) error) error {
	var err error
	for time.Now().Before(w.deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = call(ctx)
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond) // a platform's poll pace
	}
	return err
}

// wait polls cond until it holds, fails, or the deadline passes.
func (w *workload) wait(what string, cond func(context.Context) (bool, error)) error {
	for time.Now().Before(w.deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok, err := cond(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		time.Sleep(250 * time.Millisecond) // a platform's poll pace
	}
	return fmt.Errorf("%s: not by the deadline", what)
}

func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
