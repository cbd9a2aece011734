// karmada-judge says what Karmada would make of Kubernetes objects under a set of
// ResourceInterpreterCustomizations, with Karmada's own code rather than ours:
//
//   - check: every Lua script of every customization compiled in Karmada's sandboxed VM
//     (luavm.NewWithContext and LoadString, what `karmadactl interpret --check` runs).
//   - objects: each object as a member cluster's copy, through the declarative interpreter
//     (declarative.ConfigurableInterpreter loaded with the customizations, as `karmadactl
//     interpret --operation ...` loads them): InterpretHealth, read into the health the work
//     status controller records (Healthy, Unhealthy, or Unknown when the script fails), and
//     ReflectStatus, the status it copies into the Work.
//   - fleets: a resource template and its copies on member clusters; each copy reflected and
//     judged as above, assembled into AggregatedStatusItems as Karmada's helper assembles them
//     (cluster name, reflected status, applied, health; sorted by cluster name), and
//     AggregateStatus run on the template with them.
//
// Usage: karmada-judge --customizations FILE < request.json
// where FILE holds ResourceInterpreterCustomizations (YAML, one or more documents) and
// request.json is {"objects": [object...], "fleets": [{"template": object, "members":
// [{"cluster": name, "object": object}...]}...]}.
// Output (stdout, JSON): {"checks": [{"customization", "operation", "error"}...], "objects":
// [{"kind", "namespace", "name", "health", "status", "errors"}...], "fleets": [{"kind", "name",
// "items", "aggregated", "errors"}...]}; "error"/"errors" say what Karmada could not run.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	configv1alpha1 "github.com/karmada-io/karmada/pkg/apis/config/v1alpha1"
	workv1alpha2 "github.com/karmada-io/karmada/pkg/apis/work/v1alpha2"
	"github.com/karmada-io/karmada/pkg/resourceinterpreter/customized/declarative"
	"github.com/karmada-io/karmada/pkg/resourceinterpreter/customized/declarative/luavm"
	"github.com/karmada-io/karmada/pkg/util/interpreter"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

type request struct {
	Objects []json.RawMessage `json:"objects"`
	Fleets  []struct {
		Template json.RawMessage `json:"template"`
		Members  []struct {
			Cluster string          `json:"cluster"`
			Object  json.RawMessage `json:"object"`
		} `json:"members"`
	} `json:"fleets"`
}

type check struct {
	Customization string `json:"customization"`
	Operation     string `json:"operation"`
	Error         string `json:"error,omitempty"`
}

type objectJudgement struct {
	Kind      string          `json:"kind"`
	Namespace string          `json:"namespace,omitempty"`
	Name      string          `json:"name"`
	Health    string          `json:"health,omitempty"`
	Status    json.RawMessage `json:"status,omitempty"`
	Errors    []string        `json:"errors,omitempty"`
}

type fleetJudgement struct {
	Kind       string                              `json:"kind"`
	Name       string                              `json:"name"`
	Items      []workv1alpha2.AggregatedStatusItem `json:"items"`
	Aggregated map[string]any                      `json:"aggregated,omitempty"`
	Errors     []string                            `json:"errors,omitempty"`
}

type response struct {
	Checks  []check           `json:"checks"`
	Objects []objectJudgement `json:"objects"`
	Fleets  []fleetJudgement  `json:"fleets"`
}

func main() {
	file := flag.String("customizations", "", "a YAML file of ResourceInterpreterCustomizations")
	flag.Parse()
	if err := run(*file, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "karmada-judge:", err)
		os.Exit(1)
	}
}

func run(file string, in io.Reader, out io.Writer) error {
	customizations, err := readCustomizations(file)
	if err != nil {
		return err
	}
	var req request
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &req); err != nil {
		return fmt.Errorf("request: %w", err)
	}

	// As `karmadactl interpret --operation` builds it: no informer, the customizations loaded.
	ci := declarative.NewConfigurableInterpreter(nil)
	ci.LoadConfig(customizations)

	resp := response{Checks: checks(customizations), Objects: []objectJudgement{}, Fleets: []fleetJudgement{}}
	for _, raw := range req.Objects {
		obj, err := object(raw)
		if err != nil {
			return err
		}
		j := objectJudgement{Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
		health, status, errs := member(ci, obj)
		j.Health, j.Errors = string(health), errs
		if status != nil {
			j.Status = status.Raw
		}
		resp.Objects = append(resp.Objects, j)
	}
	for _, f := range req.Fleets {
		template, err := object(f.Template)
		if err != nil {
			return err
		}
		j := fleetJudgement{Kind: template.GetKind(), Name: template.GetName(), Items: []workv1alpha2.AggregatedStatusItem{}}
		for _, m := range f.Members {
			obj, err := object(m.Object)
			if err != nil {
				return err
			}
			health, status, errs := member(ci, obj)
			for _, e := range errs {
				j.Errors = append(j.Errors, m.Cluster+": "+e)
			}
			j.Items = append(j.Items, workv1alpha2.AggregatedStatusItem{
				ClusterName: m.Cluster, Status: status, Applied: true, Health: health,
			})
		}
		// helper.assembleWorkStatus sorts the items by cluster name.
		sort.Slice(j.Items, func(a, b int) bool { return j.Items[a].ClusterName < j.Items[b].ClusterName })
		aggregated, enabled, err := ci.AggregateStatus(template, j.Items)
		switch {
		case err != nil:
			j.Errors = append(j.Errors, "AggregateStatus: "+err.Error())
		case !enabled:
			j.Errors = append(j.Errors, "AggregateStatus: no statusAggregation for "+template.GroupVersionKind().String())
		default:
			j.Aggregated = aggregated.Object
		}
		resp.Fleets = append(resp.Fleets, j)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(resp)
}

// member is what the work status controller records of a member cluster's copy: the status
// ReflectStatus returns, and the health InterpretHealth says (Unknown when it fails).
func member(ci *declarative.ConfigurableInterpreter, obj *unstructured.Unstructured) (workv1alpha2.ResourceHealth, *runtime.RawExtension, []string) {
	var errs []string
	health := workv1alpha2.ResourceUnknown
	if healthy, enabled, err := ci.InterpretHealth(obj); err != nil {
		errs = append(errs, "InterpretHealth: "+err.Error())
	} else if !enabled {
		errs = append(errs, "InterpretHealth: no healthInterpretation for "+obj.GroupVersionKind().String())
	} else if healthy {
		health = workv1alpha2.ResourceHealthy
	} else {
		health = workv1alpha2.ResourceUnhealthy
	}
	status, enabled, err := ci.ReflectStatus(obj)
	if err != nil {
		errs = append(errs, "ReflectStatus: "+err.Error())
	} else if !enabled {
		errs = append(errs, "ReflectStatus: no statusReflection for "+obj.GroupVersionKind().String())
	}
	return health, status, errs
}

// checks compiles every script as `karmadactl interpret --check` does (its checkScript).
func checks(customizations []*configv1alpha1.ResourceInterpreterCustomization) []check {
	out := []check{}
	for _, c := range customizations {
		for _, rule := range interpreter.AllResourceInterpreterCustomizationRules {
			script := rule.GetScript(c)
			if script == "" {
				continue
			}
			ch := check{Customization: c.Name, Operation: rule.Name()}
			if err := compile(script); err != nil {
				ch.Error = err.Error()
			}
			out = append(out, ch)
		}
	}
	return out
}

func compile(script string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l, err := luavm.NewWithContext(ctx)
	if err != nil {
		return err
	}
	defer l.Close()
	_, err = l.LoadString(script)
	return err
}

// readCustomizations decodes every ResourceInterpreterCustomization of the file: its YAML
// documents, and the items of a List.
func readCustomizations(file string) ([]*configv1alpha1.ResourceInterpreterCustomization, error) {
	if file == "" {
		return nil, errors.New("--customizations is required")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*configv1alpha1.ResourceInterpreterCustomization
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		raw, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		// kubectl applies a List as its items; the chart's file is one, so that its kinds
		// share the scripts through YAML anchors.
		var list struct {
			Kind  string            `json:"kind"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		items := []json.RawMessage{raw}
		if list.Kind == "List" {
			items = list.Items
		}
		for _, item := range items {
			c, err := customization(item)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no ResourceInterpreterCustomization", file)
	}
	return out, nil
}

// customization decodes one ResourceInterpreterCustomization strictly: a misspelt field would
// otherwise drop a script silently.
func customization(raw []byte) (*configv1alpha1.ResourceInterpreterCustomization, error) {
	c := &configv1alpha1.ResourceInterpreterCustomization{}
	if err := yaml.UnmarshalStrict(raw, c); err != nil {
		return nil, err
	}
	if c.Kind != "ResourceInterpreterCustomization" || c.APIVersion != configv1alpha1.GroupVersion.String() {
		return nil, fmt.Errorf("%s %s is not a %s ResourceInterpreterCustomization", c.APIVersion, c.Kind, configv1alpha1.GroupVersion)
	}
	if c.Spec.Target.APIVersion == "" || c.Spec.Target.Kind == "" {
		return nil, fmt.Errorf("%s: target.apiVersion and target.kind must be set", c.Name)
	}
	return c, nil
}

// object decodes as the API machinery does (integers as int64), which is what Karmada's
// controllers hand the interpreter.
func object(raw []byte) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	return obj, nil
}
