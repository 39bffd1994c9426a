// kstatus prints the status that sigs.k8s.io/cli-utils/pkg/kstatus computes for Kubernetes objects: the
// library Flux (and kpt, and `kubectl wait`-style tooling built on cli-utils) uses to decide whether a
// resource is Current, InProgress, Failed, Terminating or Unknown.
//
// Input on stdin: one JSON object, or a List (`kubectl get -o json`). Output on stdout: one JSON line per
// object: {"kind", "namespace", "name", "status", "message"}.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type result struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Status    string `json:"status"`
	Message   string `json:"message"`
}

func main() {
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading stdin: %v", err)
	}
	// The unstructured JSON scheme keeps integers int64 (encoding/json would make them float64, which
	// kstatus' generation checks reject) and understands Lists.
	decoded, _, err := unstructured.UnstructuredJSONScheme.Decode(raw, nil, nil)
	if err != nil {
		fail("stdin is not a Kubernetes object or List: %v", err)
	}
	var items []unstructured.Unstructured
	switch obj := decoded.(type) {
	case *unstructured.Unstructured:
		items = append(items, *obj)
	case *unstructured.UnstructuredList:
		items = obj.Items
	default:
		fail("unexpected %T", decoded)
	}
	out := json.NewEncoder(os.Stdout)
	for i := range items {
		u := &items[i]
		res, err := status.Compute(u)
		if err != nil {
			fail("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
		if err := out.Encode(result{u.GetKind(), u.GetNamespace(), u.GetName(), res.Status.String(), res.Message}); err != nil {
			fail("writing: %v", err)
		}
	}
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "kstatus: "+format+"\n", args...)
	os.Exit(2)
}
