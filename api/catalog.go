package api

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Offerings lists the registered services and plans (internal/offerings,
// from an informer cache): what the catalog endpoint serves.
type Offerings interface {
	Services(ctx context.Context) ([]osbv1alpha1.SFService, error)
	Plans(ctx context.Context) ([]osbv1alpha1.SFPlan, error)
	// Plan and Service find one by its OSB ID; an unknown ID is
	// offerings.ErrNotFound.
	Plan(ctx context.Context, id string) (*osbv1alpha1.SFPlan, error)
	Service(ctx context.Context, id string) (*osbv1alpha1.SFService, error)
	// PlanFor finds the plan an instance of a namespace uses (a mass
	// update's dry run tells which instances are current by it).
	PlanFor(ctx context.Context, id, namespace string) (*osbv1alpha1.SFPlan, error)
}

// The OSB v2.17 catalog objects. Quartermaster-only fields (templates,
// context, manager) never appear here.
type (
	catalogResponse struct {
		Services []service `json:"services"`
	}
	service struct {
		Name                 string           `json:"name"`
		ID                   string           `json:"id"`
		Description          string           `json:"description"`
		Tags                 []string         `json:"tags,omitempty"`
		Requires             []string         `json:"requires,omitempty"`
		Bindable             bool             `json:"bindable"`
		InstancesRetrievable bool             `json:"instances_retrievable,omitempty"`
		BindingsRetrievable  bool             `json:"bindings_retrievable,omitempty"`
		AllowContextUpdates  bool             `json:"allow_context_updates,omitempty"`
		Metadata             json.RawMessage  `json:"metadata,omitempty"`
		DashboardClient      *dashboardClient `json:"dashboard_client,omitempty"`
		PlanUpdateable       bool             `json:"plan_updateable,omitempty"`
		Plans                []plan           `json:"plans"`
	}
	dashboardClient struct {
		ID          string `json:"id"`
		Secret      string `json:"secret"`
		RedirectURI string `json:"redirect_uri,omitempty"`
	}
	plan struct {
		ID                     string                       `json:"id"`
		Name                   string                       `json:"name"`
		Description            string                       `json:"description"`
		Metadata               json.RawMessage              `json:"metadata,omitempty"`
		Free                   *bool                        `json:"free,omitempty"`
		Bindable               *bool                        `json:"bindable,omitempty"`
		PlanUpdateable         *bool                        `json:"plan_updateable,omitempty"`
		BindingRotatable       *bool                        `json:"binding_rotatable,omitempty"`
		Schemas                json.RawMessage              `json:"schemas,omitempty"`
		MaximumPollingDuration *int64                       `json:"maximum_polling_duration,omitempty"`
		MaintenanceInfo        *osbv1alpha1.MaintenanceInfo `json:"maintenance_info,omitempty"`
	}
)

// getCatalog serves GET /v2/catalog: every SFService of the broker's
// namespace with its SFPlans, as the cache holds them now, so that a change
// shows in the next call. Services registered in other namespaces are for
// kubectl users of those namespaces, not for OSB platforms.
func (s *Server) getCatalog(w http.ResponseWriter, r *http.Request) {
	services, err := s.Offerings.Services(r.Context())
	if err != nil {
		s.internalError(w, r, "reading the catalog", err)
		return
	}
	plans, err := s.Offerings.Plans(r.Context())
	if err != nil {
		s.internalError(w, r, "reading the catalog", err)
		return
	}
	byService := map[string][]plan{}
	for _, p := range plans {
		if p.Namespace != s.Namespace {
			continue
		}
		byService[p.Spec.ServiceID] = append(byService[p.Spec.ServiceID], toPlan(p.Spec))
	}
	resp := catalogResponse{Services: make([]service, 0, len(services))}
	for _, svc := range services {
		if svc.Namespace != s.Namespace {
			continue
		}
		ps := byService[svc.Spec.ID]
		if ps == nil {
			ps = []plan{}
		}
		slices.SortFunc(ps, func(a, b plan) int { return strings.Compare(a.Name, b.Name) })
		resp.Services = append(resp.Services, toService(svc.Spec, ps))
	}
	slices.SortFunc(resp.Services, func(a, b service) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, resp)
}

func toService(s osbv1alpha1.SFServiceSpec, plans []plan) service {
	out := service{
		Name: s.Name, ID: s.ID, Description: s.Description, Tags: s.Tags, Requires: s.Requires,
		Bindable: s.Bindable, InstancesRetrievable: s.InstancesRetrievable || s.InstanceRetrievable, BindingsRetrievable: s.BindingsRetrievable || s.BindingRetrievable,
		AllowContextUpdates: s.AllowContextUpdates, Metadata: raw(s.Metadata), PlanUpdateable: s.PlanUpdatable, Plans: plans,
	}
	if d := s.DashboardClient; d != nil {
		out.DashboardClient = &dashboardClient{ID: d.ID, Secret: d.Secret, RedirectURI: d.RedirectTo()}
	}
	return out
}

func toPlan(p osbv1alpha1.SFPlanSpec) plan {
	return plan{
		ID: p.ID, Name: p.Name, Description: p.Description, Metadata: raw(p.Metadata),
		Free: p.Free, Bindable: p.Bindable, PlanUpdateable: p.PlanUpdatable, BindingRotatable: p.BindingRotatable, Schemas: raw(p.Schemas),
		MaximumPollingDuration: p.MaximumPollingDuration, MaintenanceInfo: p.MaintenanceInfo,
	}
}

func raw(j *apiextensionsv1.JSON) json.RawMessage {
	if j == nil || len(j.Raw) == 0 || string(j.Raw) == "null" {
		return nil
	}
	return j.Raw
}
