package trace

import (
	"fmt"
	"io"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

var compare = strings.Compare

// Text writes the trace as a tree, one resource a line, its runs and
// their whole failure messages under it.
func Text(w io.Writer, root Node, now time.Time) {
	write(w, root, "", "", now)
}

func write(w io.Writer, n Node, first, rest string, now time.Time) {
	name := n.Name
	if n.Namespace != "" {
		name = n.Namespace + "/" + n.Name
	}
	line := fmt.Sprintf("%s%s %s", first, n.Kind, name)
	if n.State != "" {
		line += "  [" + n.State + "]"
	}
	if n.Detail != "" {
		line += "  " + n.Detail
	}
	fmt.Fprintln(w, line)
	for _, r := range n.Runs {
		fmt.Fprintf(w, "%s    run %s %s, %s, started %s ago (%s)\n", rest, r.Type, strings.ToLower(r.Status), r.RunID,
			now.Sub(r.Started).Round(time.Second), r.WorkflowID)
		if r.Failure != "" {
			for _, l := range strings.Split(r.Failure, "\n") {
				fmt.Fprintf(w, "%s      | %s\n", rest, l)
			}
		}
	}
	for i, c := range n.Children {
		if i == len(n.Children)-1 {
			write(w, c, rest+"└─ ", rest+"   ", now)
		} else {
			write(w, c, rest+"├─ ", rest+"│  ", now)
		}
	}
}

// condition sums up conditions: the Ready (or Available) one, else the
// first, as "Type=Status: message".
func condition(conds []metav1.Condition) string {
	if len(conds) == 0 {
		return ""
	}
	pick := conds[0]
	for _, c := range conds {
		if c.Type == "Ready" || c.Type == "Available" {
			pick = c
			break
		}
	}
	s := fmt.Sprintf("%s=%s", pick.Type, pick.Status)
	if pick.Message != "" {
		s += ": " + pick.Message
	}
	return s
}

// objectConditions sums up an applied object's status: its conditions as
// condition does, or its ready replicas.
func objectConditions(obj *unstructured.Unstructured) string {
	raw, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	var conds []metav1.Condition
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		c := metav1.Condition{}
		c.Type, _ = m["type"].(string)
		status, _ := m["status"].(string)
		c.Status = metav1.ConditionStatus(status)
		c.Message, _ = m["message"].(string)
		conds = append(conds, c)
	}
	if s := condition(conds); s != "" {
		return s
	}
	if want, found, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas"); found {
		ready, _, _ := unstructured.NestedInt64(obj.Object, "status", "readyReplicas")
		return fmt.Sprintf("%d of %d replicas ready", ready, want)
	}
	return ""
}
