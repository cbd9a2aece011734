// health-judge says what the GitOps tools would make of Kubernetes objects, each with its own
// code rather than ours:
//
//   - kstatus: status.Compute from sigs.k8s.io/cli-utils/pkg/kstatus/status (what Flux's
//     wait, kpt and cli-utils' applier read).
//   - Argo CD: the health script that an argocd-cm ConfigMap assigns the object's kind
//     (resource.customizations.health.<group>_<kind>, exact key first, then wildcard keys),
//     run in gopher-lua (the interpreter Argo CD embeds) with Argo CD's calling convention,
//     copied from argo-cd util/lua: only the package, base, table and os libraries, a one-second
//     deadline, the object as the global `obj` (decoded as Argo CD's decodeValue does), the
//     returned table encoded with gopher-json and read as {status, message}, and a status outside
//     Argo CD's set reported as Unknown.
//   - Flux: the Kustomization healthCheckExprs entry for the object's apiVersion and kind,
//     evaluated by Flux's own evaluator (github.com/fluxcd/pkg/runtime/cel.StatusEvaluator,
//     cel-go underneath), which is what kustomize-controller runs.
//
// Usage: health-judge --argocd-cm FILE --flux-exprs FILE < objects.json
// where objects.json is a JSON array of objects (or a List), and the files are the ones the
// chart ships: an argocd-cm ConfigMap (or a patch of one) and a YAML list of healthCheckExprs.
// Output (stdout, JSON): one entry per object, in order:
// {"kind", "namespace", "name", "kstatus": {"status", "message"}, "argocd": {"status",
// "message"}, "flux": {"status", "message"}}; an entry's "errors" say what could not be judged
// (no health check for its kind, a script that fails).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	fluxkustomize "github.com/fluxcd/pkg/apis/kustomize"
	fluxcel "github.com/fluxcd/pkg/runtime/cel"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	luajson "layeh.com/gopher-json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

const healthKeyPrefix = "resource.customizations.health."

type verdict struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

type judgement struct {
	Kind      string   `json:"kind"`
	Namespace string   `json:"namespace,omitempty"`
	Name      string   `json:"name"`
	KStatus   *verdict `json:"kstatus,omitempty"`
	ArgoCD    *verdict `json:"argocd,omitempty"`
	Flux      *verdict `json:"flux,omitempty"`
	Errors    []string `json:"errors,omitempty"`
}

func main() {
	argocdCM := flag.String("argocd-cm", "", "an argocd-cm ConfigMap holding resource.customizations.health.* keys")
	fluxExprs := flag.String("flux-exprs", "", "a YAML list of Kustomization healthCheckExprs entries")
	flag.Parse()
	if err := run(*argocdCM, *fluxExprs, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "health-judge:", err)
		os.Exit(1)
	}
}

func run(argocdCM, fluxExprs string, in io.Reader, out io.Writer) error {
	scripts, err := healthScripts(argocdCM)
	if err != nil {
		return err
	}
	exprs, err := healthCheckExprs(fluxExprs)
	if err != nil {
		return err
	}
	objects, err := readObjects(in)
	if err != nil {
		return err
	}
	judged := make([]judgement, 0, len(objects))
	for _, obj := range objects {
		judged = append(judged, judge(obj, scripts, exprs))
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(judged)
}

func judge(obj *unstructured.Unstructured, scripts map[string]string, exprs []fluxkustomize.CustomHealthCheck) judgement {
	j := judgement{Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
	fail := func(what string, err error) { j.Errors = append(j.Errors, fmt.Sprintf("%s: %v", what, err)) }

	if res, err := status.Compute(obj); err != nil {
		fail("kstatus", err)
	} else {
		j.KStatus = &verdict{Status: res.Status.String(), Message: res.Message}
	}

	if script := healthScript(scripts, obj); script == "" {
		fail("argocd", fmt.Errorf("no health script for %s", configMapKey(obj)))
	} else if hs, err := executeHealthLua(obj, script); err != nil {
		fail("argocd", err)
	} else {
		j.ArgoCD = hs
	}

	if check := fluxCheck(exprs, obj); check == nil {
		fail("flux", fmt.Errorf("no healthCheckExprs entry for %s %s", obj.GetAPIVersion(), obj.GetKind()))
	} else if evaluator, err := fluxcel.NewStatusEvaluator(&check.HealthCheckExpressions); err != nil {
		fail("flux", err)
	} else if res, err := evaluator.Evaluate(context.Background(), obj); err != nil {
		// As Flux's generic status reader reports it: Unknown, and waited on.
		j.Flux = &verdict{Status: status.UnknownStatus.String(), Message: err.Error()}
	} else {
		j.Flux = &verdict{Status: res.Status.String(), Message: res.Message}
	}
	return j
}

func readObjects(in io.Reader) ([]*unstructured.Unstructured, error) {
	data, err := io.ReadAll(in)
	if err != nil {
		return nil, err
	}
	var items []map[string]any
	if err := json.Unmarshal(data, &items); err != nil {
		var list struct {
			Items []map[string]any `json:"items"`
		}
		if err2 := json.Unmarshal(data, &list); err2 != nil {
			return nil, fmt.Errorf("objects: neither a JSON array nor a List: %v", err)
		}
		items = list.Items
	}
	objects := make([]*unstructured.Unstructured, 0, len(items))
	for _, item := range items {
		// As the API machinery decodes it (integers as int64), which is what kstatus and
		// the Flux evaluator read in their controllers.
		raw, err := json.Marshal(item)
		if err != nil {
			return nil, err
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw); err != nil {
			return nil, err
		}
		objects = append(objects, obj)
	}
	return objects, nil
}

// healthScripts reads the health scripts of an argocd-cm ConfigMap, keyed as Argo CD's
// settings key them: `resource.customizations.health.<group>_<kind>` becomes `<group>/<kind>`
// (the group is what precedes the last underscore).
func healthScripts(file string) (map[string]string, error) {
	if file == "" {
		return nil, fmt.Errorf("--argocd-cm is required")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	scripts := map[string]string{}
	for key, script := range cm.Data {
		groupKind, ok := strings.CutPrefix(key, healthKeyPrefix)
		if !ok {
			continue
		}
		i := strings.LastIndex(groupKind, "_")
		if i < 0 {
			scripts[groupKind] = script
			continue
		}
		scripts[groupKind[:i]+"/"+groupKind[i+1:]] = script
	}
	if len(scripts) == 0 {
		return nil, fmt.Errorf("%s has no %s* key", file, healthKeyPrefix)
	}
	return scripts, nil
}

// configMapKey is argo-cd's lua.GetConfigMapKey.
func configMapKey(obj *unstructured.Unstructured) string {
	gvk := obj.GroupVersionKind()
	if gvk.Group == "" {
		return gvk.Kind
	}
	return gvk.Group + "/" + gvk.Kind
}

// healthScript finds the script as argo-cd's VM.GetHealthScript does among overrides: the
// exact key, else a key whose wildcard matches (argo-cd's glob matches `*` across any
// character; no key of ours needs more than path.Match's `*` within one segment).
func healthScript(scripts map[string]string, obj *unstructured.Unstructured) string {
	key := configMapKey(obj)
	if script, ok := scripts[key]; ok {
		return script
	}
	keys := make([]string, 0, len(scripts))
	for k := range scripts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if matched, _ := path.Match(k, key); matched {
			return scripts[k]
		}
	}
	return ""
}

// executeHealthLua is argo-cd's VM.ExecuteHealthLua with UseOpenLibs false (as for scripts
// from argocd-cm), minus the safe os library's functions, which our script does not call.
func executeHealthLua(obj *unstructured.Unstructured, script string) (*verdict, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, pair := range []struct {
		n string
		f lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(pair.f), NRet: 0, Protect: true}, lua.LString(pair.n)); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", decodeValue(l, obj.Object))
	if err := l.DoString(script); err != nil {
		return nil, err
	}
	returned := l.Get(-1)
	if returned.Type() != lua.LTTable {
		return nil, fmt.Errorf("expect table output from Lua script, not %s", returned.Type())
	}
	encoded, err := luajson.Encode(returned)
	if err != nil {
		return nil, err
	}
	hs := &verdict{}
	if err := json.Unmarshal(encoded, hs); err != nil {
		return nil, err
	}
	switch hs.Status {
	case "Unknown", "Progressing", "Suspended", "Healthy", "Degraded", "Missing":
		return hs, nil
	}
	return &verdict{Status: "Unknown", Message: "Lua returned an invalid health status"}, nil
}

// decodeValue is argo-cd's util/lua decodeValue.
func decodeValue(L *lua.LState, value any) lua.LValue {
	switch converted := value.(type) {
	case bool:
		return lua.LBool(converted)
	case float64:
		return lua.LNumber(converted)
	case string:
		return lua.LString(converted)
	case json.Number:
		return lua.LString(converted)
	case int:
		return lua.LNumber(converted)
	case int32:
		return lua.LNumber(converted)
	case int64:
		return lua.LNumber(converted)
	case []any:
		arr := L.CreateTable(len(converted), 0)
		for _, item := range converted {
			arr.Append(decodeValue(L, item))
		}
		return arr
	case map[string]any:
		tbl := L.CreateTable(0, len(converted))
		for key, item := range converted {
			tbl.RawSetH(lua.LString(key), decodeValue(L, item))
		}
		return tbl
	}
	return lua.LNil
}

func healthCheckExprs(file string) ([]fluxkustomize.CustomHealthCheck, error) {
	if file == "" {
		return nil, fmt.Errorf("--flux-exprs is required")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var exprs []fluxkustomize.CustomHealthCheck
	if err := yaml.UnmarshalStrict(data, &exprs); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return exprs, nil
}

// fluxCheck picks the entry as kustomize-controller does: by apiVersion and kind.
func fluxCheck(exprs []fluxkustomize.CustomHealthCheck, obj *unstructured.Unstructured) *fluxkustomize.CustomHealthCheck {
	for i := range exprs {
		if exprs[i].APIVersion == obj.GetAPIVersion() && exprs[i].Kind == obj.GetKind() {
			return &exprs[i]
		}
	}
	return nil
}
