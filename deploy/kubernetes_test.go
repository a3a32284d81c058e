package deploy

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/web"
)

// k8sDir holds the Kubernetes manifests and their kustomization.
const k8sDir = "kubernetes"

// k8sKinds are the kinds the manifests may hold, each decoded into the
// Kubernetes API's own type. A kind missing here fails the test: add it.
var k8sKinds = map[string]func() any{
	"apps/v1 Deployment":                 func() any { return &appsv1.Deployment{} },
	"apps/v1 StatefulSet":                func() any { return &appsv1.StatefulSet{} },
	"v1 Service":                         func() any { return &corev1.Service{} },
	"v1 Secret":                          func() any { return &corev1.Secret{} },
	"policy/v1 PodDisruptionBudget":      func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1 NetworkPolicy": func() any { return &networkingv1.NetworkPolicy{} },
}

// kustomization is the part of kustomize's Kustomization that the
// directory uses; decoded strictly, so a field it does not list fails.
type kustomization struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Namespace  string           `json:"namespace,omitempty"`
	Resources  []string         `json:"resources"`
	Images     []kustomizeImage `json:"images,omitempty"`
}

// kustomizeImage sets the image of the containers that run Name.
type kustomizeImage struct {
	Name    string `json:"name"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

// workload is a Deployment or a StatefulSet: its pods and its selector.
type workload struct {
	name     string // kind/name
	selector *metav1.LabelSelector
	pod      *corev1.PodTemplateSpec
}

// manifests is every object of deploy/kubernetes, by kind and name.
type manifests struct {
	kust         kustomization
	deployments  map[string]*appsv1.Deployment
	statefulSets map[string]*appsv1.StatefulSet
	services     map[string]*corev1.Service
	secrets      map[string]*corev1.Secret
	pdbs         map[string]*policyv1.PodDisruptionBudget
	netpols      map[string]*networkingv1.NetworkPolicy
}

// loadManifests decodes kustomization.yaml and every YAML file beside it
// (decodeStrict). Every file must be one of the kustomization's
// resources, and every resource such a file.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{deployments: map[string]*appsv1.Deployment{}, statefulSets: map[string]*appsv1.StatefulSet{},
		services: map[string]*corev1.Service{}, secrets: map[string]*corev1.Secret{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, netpols: map[string]*networkingv1.NetworkPolicy{}}
	b, err := os.ReadFile(filepath.Join(k8sDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeStrict(b, &m.kust); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if m.kust.APIVersion != "kustomize.config.k8s.io/v1beta1" || m.kust.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml is %s %s", m.kust.APIVersion, m.kust.Kind)
	}
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.y*ml"))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" {
			found = append(found, base)
		}
	}
	listed := slices.Sorted(slices.Values(m.kust.Resources))
	if !slices.Equal(found, listed) {
		t.Fatalf("kustomization.yaml's resources %v, the directory's YAML files %v: each file must be a resource", listed, found)
	}
	for _, f := range found {
		b, err := os.ReadFile(filepath.Join(k8sDir, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			m.decode(t, f+" document "+strconv.Itoa(i+1), []byte(doc))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return m
}

func (m *manifests) decode(t *testing.T, where string, doc []byte) {
	t.Helper()
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	if tm == (metav1.TypeMeta{}) {
		return // only comments
	}
	newObj, ok := k8sKinds[tm.APIVersion+" "+tm.Kind]
	if !ok {
		t.Errorf("%s: %s %s is not a kind this test decodes; add it to k8sKinds", where, tm.APIVersion, tm.Kind)
		return
	}
	obj := newObj()
	if err := decodeStrict(doc, obj); err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	name := obj.(metav1.Object).GetName()
	if name == "" {
		t.Errorf("%s: no metadata.name", where)
	}
	var dup bool
	switch o := obj.(type) {
	case *appsv1.Deployment:
		dup = add(m.deployments, name, o)
	case *appsv1.StatefulSet:
		dup = add(m.statefulSets, name, o)
	case *corev1.Service:
		dup = add(m.services, name, o)
	case *corev1.Secret:
		dup = add(m.secrets, name, o)
	case *policyv1.PodDisruptionBudget:
		dup = add(m.pdbs, name, o)
	case *networkingv1.NetworkPolicy:
		dup = add(m.netpols, name, o)
	}
	if dup {
		t.Errorf("%s: a second %s %q", where, tm.Kind, name)
	}
}

// decodeStrict decodes the YAML document doc into obj as kubectl and the
// API server's strict field validation do: YAML to JSON with no regard
// for obj's types (an unquoted yes is a boolean, which a string field
// refuses), then JSON into obj with field names matched case-sensitively
// and unknown or duplicate fields refused. A misspelt or misplaced field
// fails here instead of being dropped.
func decodeStrict(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// add puts v in m under name, and reports whether the name was taken.
func add[T any](m map[string]T, name string, v T) bool {
	_, dup := m[name]
	m[name] = v
	return dup
}

func (m *manifests) workloads() []workload {
	var ws []workload
	for _, d := range m.deployments {
		ws = append(ws, workload{"Deployment/" + d.Name, d.Spec.Selector, &d.Spec.Template})
	}
	for _, s := range m.statefulSets {
		ws = append(ws, workload{"StatefulSet/" + s.Name, s.Spec.Selector, &s.Spec.Template})
	}
	return ws
}

// selecting is the workloads whose pods sel selects.
func (m *manifests) selecting(sel labels.Selector) []workload {
	var out []workload
	for _, w := range m.workloads() {
		if !sel.Empty() && sel.Matches(labels.Set(w.pod.Labels)) {
			out = append(out, w)
		}
	}
	return out
}

func selector(t *testing.T, ls *metav1.LabelSelector) labels.Selector {
	t.Helper()
	if ls == nil {
		return labels.Nothing()
	}
	s, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// hasPort reports whether a container of pod has port (a number or a
// port's name).
func hasPort(pod *corev1.PodTemplateSpec, port intstr.IntOrString) bool {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
				return true
			}
		}
	}
	return false
}

// Every manifest decodes into its API type, and the directory holds the
// objects the deployment needs.
func TestKubernetesManifests(t *testing.T) {
	m := loadManifests(t)
	for what, n := range map[string]int{"Deployment": len(m.deployments), "StatefulSet": len(m.statefulSets),
		"Service": len(m.services), "Secret": len(m.secrets), "PodDisruptionBudget": len(m.pdbs)} {
		if n == 0 {
			t.Errorf("no %s", what)
		}
	}
	for _, d := range m.deployments {
		if r := ptrOf(d.Spec.Replicas); *r < 2 {
			t.Errorf("Deployment %s: replicas %d, want at least 2", d.Name, *r)
		}
	}
}

// Selectors select what they are meant to: each workload its own pods and
// no other's, each Service and PodDisruptionBudget the pods of exactly
// one workload, on ports those pods have.
func TestKubernetesSelectors(t *testing.T) {
	m := loadManifests(t)
	for _, w := range m.workloads() {
		if got := m.selecting(selector(t, w.selector)); len(got) != 1 || got[0].name != w.name {
			t.Errorf("%s: its selector selects the pods of %v", w.name, names(got))
		}
		for _, c := range w.pod.Spec.TopologySpreadConstraints {
			if !selector(t, c.LabelSelector).Matches(labels.Set(w.pod.Labels)) {
				t.Errorf("%s: a topology spread constraint's selector misses its own pods", w.name)
			}
		}
	}
	for _, p := range m.pdbs {
		got := m.selecting(selector(t, p.Spec.Selector))
		if len(got) != 1 {
			t.Errorf("PodDisruptionBudget %s selects the pods of %v, want one workload", p.Name, names(got))
		}
		if p.Spec.MinAvailable == nil || *p.Spec.MinAvailable != intstr.FromInt32(1) {
			t.Errorf("PodDisruptionBudget %s: minAvailable %v, want 1", p.Name, p.Spec.MinAvailable)
		}
	}
	for _, d := range m.deployments {
		covered := false
		for _, p := range m.pdbs {
			covered = covered || selector(t, p.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels))
		}
		if !covered {
			t.Errorf("Deployment %s has no PodDisruptionBudget", d.Name)
		}
	}
	for _, s := range m.services {
		got := m.selecting(labels.SelectorFromSet(s.Spec.Selector))
		if len(got) != 1 {
			t.Errorf("Service %s selects the pods of %v, want one workload", s.Name, names(got))
			continue
		}
		for _, p := range s.Spec.Ports {
			target := p.TargetPort
			if target == (intstr.IntOrString{}) {
				target = intstr.FromInt32(p.Port)
			}
			if !hasPort(got[0].pod, target) {
				t.Errorf("Service %s: port %s targets %s, which %s's pods do not have", s.Name, p.Name, target.String(), got[0].name)
			}
		}
	}
	for _, st := range m.statefulSets {
		svc, ok := m.services[st.Spec.ServiceName]
		if !ok || svc.Spec.ClusterIP != corev1.ClusterIPNone ||
			!labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(st.Spec.Template.Labels)) {
			t.Errorf("StatefulSet %s: serviceName %q is not a headless Service of its pods", st.Name, st.Spec.ServiceName)
		}
	}
	checkNetworkPolicies(t, m)
}

func checkNetworkPolicies(t *testing.T, m *manifests) {
	t.Helper()
	for _, np := range m.netpols {
		to := m.selecting(selector(t, &np.Spec.PodSelector))
		if len(to) != 1 {
			t.Errorf("NetworkPolicy %s applies to the pods of %v, want one workload", np.Name, names(to))
			continue
		}
		for _, rule := range np.Spec.Ingress {
			for _, peer := range rule.From {
				if peer.PodSelector != nil && len(m.selecting(selector(t, peer.PodSelector))) == 0 {
					t.Errorf("NetworkPolicy %s: a peer selects no pods of these manifests", np.Name)
				}
			}
			for _, p := range rule.Ports {
				if p.Port == nil || !hasPort(to[0].pod, *p.Port) {
					t.Errorf("NetworkPolicy %s: port %v is not one of %s's", np.Name, p.Port, to[0].name)
				}
			}
		}
		// Egress to pods of these manifests (a peer without a namespace
		// selector) goes to ports they have.
		for _, rule := range np.Spec.Egress {
			for _, peer := range rule.To {
				if peer.PodSelector == nil || peer.NamespaceSelector != nil {
					continue
				}
				peers := m.selecting(selector(t, peer.PodSelector))
				if len(peers) != 1 {
					t.Errorf("NetworkPolicy %s: an egress peer selects the pods of %v, want one workload", np.Name, names(peers))
					continue
				}
				for _, p := range rule.Ports {
					if p.Port == nil || !hasPort(peers[0].pod, *p.Port) {
						t.Errorf("NetworkPolicy %s: egress port %v is not one of %s's", np.Name, p.Port, peers[0].name)
					}
				}
			}
		}
	}
}

func names(ws []workload) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.name)
	}
	return out
}

// Every pod runs as the restricted Pod Security Standard asks (non-root,
// no privilege escalation, every capability dropped, the runtime's
// seccomp profile) with a read-only root filesystem, sets resource
// requests and limits, and gets no API token it has no use for.
func TestKubernetesSecurityContext(t *testing.T) {
	m := loadManifests(t)
	for _, w := range m.workloads() {
		spec := w.pod.Spec
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s: automountServiceAccountToken is not false", w.name)
		}
		if spec.HostNetwork || spec.HostPID || spec.HostIPC {
			t.Errorf("%s: shares a host namespace", w.name)
		}
		pod := ptrOf(spec.SecurityContext)
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			where := w.name + " container " + c.Name
			sc := ptrOf(c.SecurityContext)
			if !isTrue(cmpOr(sc.RunAsNonRoot, pod.RunAsNonRoot)) {
				t.Errorf("%s: runAsNonRoot is not true", where)
			}
			if u := cmpOr(sc.RunAsUser, pod.RunAsUser); u != nil && *u == 0 {
				t.Errorf("%s: runAsUser 0", where)
			}
			if !isTrue(sc.ReadOnlyRootFilesystem) {
				t.Errorf("%s: readOnlyRootFilesystem is not true", where)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || isTrue(sc.Privileged) {
				t.Errorf("%s: allowPrivilegeEscalation is not false", where)
			}
			if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
				t.Errorf("%s: capabilities %+v, want drop [ALL] and nothing added", where, sc.Capabilities)
			}
			if sp := cmpOr(sc.SeccompProfile, pod.SeccompProfile); sp == nil || sp.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s: seccompProfile %+v, want RuntimeDefault", where, sp)
			}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
				if req.IsZero() || lim.IsZero() || req.Cmp(lim) > 0 {
					t.Errorf("%s: %s request %s, limit %s: want both, the request at most the limit", where, r, req.String(), lim.String())
				}
			}
		}
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

// cmpOr is the first of a (the container's) and b (the pod's) that is set.
func cmpOr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// The lockd container runs the image the Dockerfile builds, as its
// ENTRYPOINT says, with flags and variables `lockd serve` has; it listens
// on the port that the probes, the Service and the Dockerfile name; its
// probes are the contract's /readyz and /livez; its auth file and session
// secret come from a Secret here that lockd accepts; and its --redis names
// the Redis of these manifests.
func TestKubernetesLockd(t *testing.T) {
	m := loadManifests(t)
	df := readDockerfile(t)
	d, c := lockdContainer(t, m, df.tag)
	if !slices.ContainsFunc(m.kust.Images, func(i kustomizeImage) bool { return i.Name == df.tag }) {
		t.Errorf("kustomization.yaml's images has no entry for %s, so it cannot name the image", df.tag)
	}
	flags := lockdFlags(t, df, c)
	env := lockdEnv(t, df, c)
	if v, ok := flags["listen"]; ok {
		env["LOCKD_LISTEN"] = v
	}
	_, port, err := net.SplitHostPort(env["LOCKD_LISTEN"])
	if err != nil {
		t.Fatalf("listen address %q: %v", env["LOCKD_LISTEN"], err)
	}
	if !slices.Contains(df.expose, port) {
		t.Errorf("lockd listens on port %s, the Dockerfile EXPOSEs %v", port, df.expose)
	}
	checkProbes(t, d, c, port, flags)
	checkAuth(t, m, d, c, flags)
	checkRedis(t, m, flags["redis"])
	checkRedisPassword(t, m, c, flags["redis"])
	checkImageTag(t, m, c, df.tag)
	checkEgress(t, m, d, flags["redis"])
	if !df.numericUser && cmpOr(ptrOf(c.SecurityContext).RunAsUser, ptrOf(d.Spec.Template.Spec.SecurityContext).RunAsUser) == nil {
		t.Errorf("the image's USER %q is a name: without runAsUser the kubelet cannot check runAsNonRoot and refuses to start the pod", df.user)
	}
	if d.Spec.Template.Spec.EnableServiceLinks == nil || *d.Spec.Template.Spec.EnableServiceLinks {
		t.Errorf("enableServiceLinks is not false: a Service named lockd would add LOCKD_* variables, which lockd reads as flags")
	}
}

// ptrOf is p, or a pointer to T's zero value when p is nil.
func ptrOf[T any](p *T) *T {
	if p == nil {
		return new(T)
	}
	return p
}

// lockdContainer is the one container that runs the image tag.
func lockdContainer(t *testing.T, m *manifests, tag string) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	var d *appsv1.Deployment
	var c *corev1.Container
	n := 0
	for _, dep := range m.deployments {
		for i := range dep.Spec.Template.Spec.Containers {
			ct := &dep.Spec.Template.Spec.Containers[i]
			if repo, _, _ := strings.Cut(ct.Image, ":"); repo == tag {
				d, c = dep, ct
				n++
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d containers run the image %s (docker build -t %s in the Dockerfile), want 1", n, tag, tag)
	}
	return d, c
}

// lockdFlags checks that the container's command line is the image's
// ENTRYPOINT with `lockd serve` flags, and returns the flags' values.
func lockdFlags(t *testing.T, df dockerfile, c *corev1.Container) map[string]string {
	t.Helper()
	if len(c.Command) > 0 && !slices.Equal(c.Command, df.entrypoint) {
		t.Errorf("command %q replaces the image's ENTRYPOINT %q", c.Command, df.entrypoint)
	}
	argv := slices.Concat(df.entrypoint, c.Args)
	if len(c.Args) == 0 && len(c.Command) == 0 {
		argv = slices.Concat(df.entrypoint, df.cmd)
	}
	if len(argv) < 2 || argv[1] != "serve" {
		t.Fatalf("the container runs %q, not lockd serve", argv)
	}
	known := serveFlags(t)
	flags := map[string]string{}
	for _, a := range argv[2:] {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch {
		case !strings.HasPrefix(a, "--") || !ok:
			t.Errorf("argument %q: write flags as --name=value", a)
		case !known[name]:
			t.Errorf("argument %q: lockd serve has no flag --%s", a, name)
		default:
			flags[name] = value
		}
	}
	return flags
}

// lockdEnv checks that every variable the container sets is one lockd
// reads, and returns the environment lockd sees: the Dockerfile's ENV, then
// the container's plain values (a value from a Secret reads as "secret").
func lockdEnv(t *testing.T, df dockerfile, c *corev1.Container) map[string]string {
	t.Helper()
	known := serveVariables(t)
	env := map[string]string{}
	for k, v := range df.env {
		env[k] = v
	}
	for _, e := range c.Env {
		if !known[e.Name] {
			t.Errorf("env %s: lockd serve reads no such variable", e.Name)
		}
		env[e.Name] = e.Value
		if e.ValueFrom != nil {
			env[e.Name] = "secret"
		}
	}
	if len(c.EnvFrom) > 0 {
		t.Errorf("envFrom: list each variable, so that this test can check it")
	}
	return env
}

// checkProbes: readiness on /readyz, liveness (and startup, if any) on
// /livez, on the port lockd listens on, in the scheme it serves.
func checkProbes(t *testing.T, d *appsv1.Deployment, c *corev1.Container, port string, flags map[string]string) {
	t.Helper()
	n, _ := strconv.Atoi(port)
	if !hasPort(&d.Spec.Template, intstr.FromInt32(int32(n))) {
		t.Errorf("no containerPort %s, the port lockd listens on", port)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{"readinessProbe", c.ReadinessProbe, "/readyz"},
		{"livenessProbe", c.LivenessProbe, "/livez"},
		{"startupProbe", c.StartupProbe, "/livez"},
	} {
		if p.probe == nil && p.name == "startupProbe" {
			continue
		}
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: want an httpGet on %s", p.name, p.path)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path {
			t.Errorf("%s: path %s, want %s", p.name, g.Path, p.path)
		}
		// A probe sends no API key: the path must be an operation of the
		// contract that needs none.
		if op, ok := api.OperationFor("GET", g.Path); !ok || op.Scope != "none" {
			t.Errorf("%s: GET %s is not an operation of api/openapi.yaml that needs no key", p.name, g.Path)
		}
		if g.Port.Type == intstr.String {
			if !hasPort(&d.Spec.Template, g.Port) || containerPort(c, g.Port.StrVal) != int32(n) {
				t.Errorf("%s: port %s is not containerPort %s", p.name, g.Port.StrVal, port)
			}
		} else if g.Port.IntVal != int32(n) {
			t.Errorf("%s: port %d, lockd listens on %s", p.name, g.Port.IntVal, port)
		}
		want := corev1.URISchemeHTTP
		if flags["tls-cert"] != "" {
			want = corev1.URISchemeHTTPS
		}
		if g.Scheme != "" && g.Scheme != want {
			t.Errorf("%s: scheme %s, lockd serves %s", p.name, g.Scheme, want)
		}
	}
}

// containerPort is the number of c's port called name, or 0.
func containerPort(c *corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// checkAuth: --auth-file is a file of a Secret volume, and lockd parses
// the Secret's content (lockd refuses to listen beyond loopback without
// keys); LOCKD_SESSION_SECRET is long enough for lockd to start. Every key
// and the session secret the Secret ships are examples that lockd refuses
// (N21): the Secret must be replaced before the pods start, and nobody
// gets a working admin key by applying it as is.
func checkAuth(t *testing.T, m *manifests, d *appsv1.Deployment, c *corev1.Container, flags map[string]string) {
	t.Helper()
	path := flags["auth-file"]
	if path == "" {
		t.Fatal("no --auth-file: lockd would run without API keys")
	}
	content, ok := secretFile(t, m, d, c, path)
	if !ok {
		t.Fatalf("--auth-file=%s is not a file of a Secret volume mounted in the container", path)
	}
	keys, err := auth.Parse([]byte(content))
	if err != nil || !keys.Enabled() {
		t.Errorf("lockd cannot read the auth file in the Secret, or it holds no key: %v", err)
	} else if ex := auth.ExampleKeys([]byte(content)); len(ex) != keys.Len() {
		t.Errorf("the Secret's auth file has %d keys, of which lockd refuses only %v as examples: a shipped key would work", keys.Len(), ex)
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		v, ok := secretValue(m, ref.Name, ref.Key)
		if !ok || isTrue(ref.Optional) {
			t.Errorf("env %s: Secret %s has no key %s (or it is optional)", e.Name, ref.Name, ref.Key)
		}
		if e.Name == "LOCKD_SESSION_SECRET" && len(v) < web.MinSecretLen {
			t.Errorf("LOCKD_SESSION_SECRET is %d bytes; lockd needs at least %d", len(v), web.MinSecretLen)
		}
		if e.Name == "LOCKD_SESSION_SECRET" && !auth.IsExample(v) {
			t.Errorf("the Secret's session secret is not one lockd refuses as an example: a shipped secret would work")
		}
	}
}

// secretFile is the content of the file at path, if path is one of a
// Secret volume mounted in c.
func secretFile(t *testing.T, m *manifests, d *appsv1.Deployment, c *corev1.Container, path string) (string, bool) {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			key := rel
			if len(v.Secret.Items) > 0 {
				key = ""
				for _, it := range v.Secret.Items {
					if it.Path == rel {
						key = it.Key
					}
				}
			}
			return secretValue(m, v.Secret.SecretName, key)
		}
	}
	return "", false
}

func secretValue(m *manifests, name, key string) (string, bool) {
	s, ok := m.secrets[name]
	if !ok {
		return "", false
	}
	if v, ok := s.StringData[key]; ok {
		return v, true
	}
	v, ok := s.Data[key]
	return string(v), ok
}

// checkRedis: --redis names the pod of a StatefulSet here through its
// headless Service (<statefulset>-<ordinal>.<service>), on its port.
func checkRedis(t *testing.T, m *manifests, redisURL string) {
	t.Helper()
	u, err := url.Parse(redisURL)
	if err != nil || u.Scheme != "redis" {
		t.Fatalf("--redis=%q: want a redis:// URL (%v)", redisURL, err)
	}
	pod, svc, _ := strings.Cut(u.Hostname(), ".")
	for _, st := range m.statefulSets {
		ord, ok := strings.CutPrefix(pod, st.Name+"-")
		n, err := strconv.Atoi(ord)
		if !ok || err != nil || st.Spec.ServiceName != svc || st.Spec.Replicas == nil || n >= int(*st.Spec.Replicas) {
			continue
		}
		port, _ := strconv.Atoi(u.Port())
		if !hasPort(&st.Spec.Template, intstr.FromInt32(int32(port))) {
			t.Errorf("--redis=%s: StatefulSet %s's pods have no port %d", redisURL, st.Name, port)
		}
		return
	}
	t.Errorf("--redis=%s names no pod of a StatefulSet here (<statefulset>-<n>.<service>)", redisURL)
}

// checkRedisPassword (N29): the Redis here requires a password
// (--requirepass from its environment, which a Secret's key fills), lockd
// sends that same Secret key as LOCKD_REDIS_PASSWORD and not in the --redis
// URL (kubectl describe shows arguments), and the Redis probe's redis-cli
// has it too (REDISCLI_AUTH). The shipped password is an example that
// lockd refuses, as the API keys are.
func checkRedisPassword(t *testing.T, m *manifests, c *corev1.Container, redisURL string) {
	t.Helper()
	if u, err := url.Parse(redisURL); err == nil && u.User != nil {
		if _, set := u.User.Password(); set {
			t.Errorf("--redis carries a password: pass it as LOCKD_REDIS_PASSWORD from the Secret")
		}
	}
	ref := secretRef(c, "LOCKD_REDIS_PASSWORD")
	if ref == nil {
		t.Fatal("the lockd container has no LOCKD_REDIS_PASSWORD from a Secret")
	}
	v, ok := secretValue(m, ref.Name, ref.Key)
	if !ok {
		t.Fatalf("LOCKD_REDIS_PASSWORD: Secret %s has no key %s", ref.Name, ref.Key)
	}
	if !auth.IsExample(v) {
		t.Errorf("the Secret's Redis password is not one lockd refuses as an example: a shipped password would work")
	}
	u, _ := url.Parse(redisURL)
	pod, _, _ := strings.Cut(u.Hostname(), ".")
	for _, st := range m.statefulSets {
		if !strings.HasPrefix(pod, st.Name+"-") {
			continue
		}
		rc := &st.Spec.Template.Spec.Containers[0]
		argv := slices.Concat(rc.Command, rc.Args)
		i := slices.Index(argv, "--requirepass")
		if i < 0 || i+1 >= len(argv) {
			t.Fatalf("StatefulSet %s: redis-server has no --requirepass: %q", st.Name, argv)
		}
		name, ok := strings.CutPrefix(argv[i+1], "$(")
		name, ok2 := strings.CutSuffix(name, ")")
		if !ok || !ok2 {
			t.Fatalf("StatefulSet %s: --requirepass %q, want $(VAR) from the container's environment (a literal would show in kubectl describe)", st.Name, argv[i+1])
		}
		for _, env := range []string{name, "REDISCLI_AUTH"} {
			if r := secretRef(rc, env); r == nil || *r != *ref {
				t.Errorf("StatefulSet %s: %s is not the Secret key lockd sends (%s/%s)", st.Name, env, ref.Name, ref.Key)
			}
		}
		return
	}
	t.Errorf("--redis=%s names no StatefulSet here", redisURL)
}

// checkEgress: where a NetworkPolicy limits lockd's egress, a rule lets it
// reach the Redis that --redis names, on its port.
func checkEgress(t *testing.T, m *manifests, d *appsv1.Deployment, redisURL string) {
	t.Helper()
	u, _ := url.Parse(redisURL)
	port, _ := strconv.Atoi(u.Port())
	pod, _, _ := strings.Cut(u.Hostname(), ".")
	limited, allowed := false, false
	for _, np := range m.netpols {
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) ||
			!selector(t, &np.Spec.PodSelector).Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		limited = true
		for _, rule := range np.Spec.Egress {
			toRedis := false
			for _, peer := range rule.To {
				for _, w := range m.selecting(selector(t, peer.PodSelector)) {
					toRedis = toRedis || (peer.NamespaceSelector == nil && strings.HasPrefix(pod, strings.TrimPrefix(w.name, "StatefulSet/")+"-"))
				}
			}
			for _, p := range rule.Ports {
				allowed = allowed || (toRedis && p.Port != nil && p.Port.IntVal == int32(port))
			}
		}
	}
	if limited && !allowed {
		t.Errorf("a NetworkPolicy limits lockd's egress, and none lets it reach --redis=%s", redisURL)
	}
}

// secretRef is where c's variable name comes from, if from a Secret.
func secretRef(c *corev1.Container, name string) *corev1.SecretKeySelector {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && !isTrue(e.ValueFrom.SecretKeyRef.Optional) {
			return e.ValueFrom.SecretKeyRef
		}
	}
	return nil
}

// checkImageTag (N29): lockd's image is a version, in the container and in
// the kustomization, never latest (nor no tag, which means latest): every
// node runs the same build, and a rollout changes the image.
func checkImageTag(t *testing.T, m *manifests, c *corev1.Container, name string) {
	t.Helper()
	if _, tag, _ := strings.Cut(c.Image, ":"); tag == "" || tag == "latest" {
		t.Errorf("the lockd container's image %q has no version tag", c.Image)
	}
	for _, i := range m.kust.Images {
		if i.Name == name && i.Digest == "" && (i.NewTag == "" || i.NewTag == "latest") {
			t.Errorf("kustomization.yaml sets %s's tag to %q: name a version", name, i.NewTag)
		}
	}
}

// dockerfile is what the test reads from ../Dockerfile: the final stage's
// ENTRYPOINT, CMD, USER, EXPOSE and ENV, and the image's name from the
// `docker build -t NAME .` its comment shows.
type dockerfile struct {
	tag         string
	entrypoint  []string
	cmd         []string
	user        string
	numericUser bool
	expose      []string
	env         map[string]string
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var df dockerfile
	if m := regexp.MustCompile(`docker build -t (\S+) \.`).FindSubmatch(b); m != nil {
		df.tag = string(m[1])
	}
	for _, line := range strings.Split(string(b), "\n") {
		instr, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch instr {
		case "FROM": // only the final stage counts
			df = dockerfile{tag: df.tag, env: map[string]string{}}
		case "ENTRYPOINT", "CMD":
			var argv []string
			if err := json.Unmarshal([]byte(rest), &argv); err != nil {
				t.Fatalf("Dockerfile %s %s: want the JSON form (%v)", instr, rest, err)
			}
			if instr == "CMD" {
				df.cmd = argv
			} else {
				df.entrypoint = argv
			}
		case "USER":
			df.user, _, _ = strings.Cut(rest, ":")
			_, err := strconv.Atoi(df.user)
			df.numericUser = err == nil
		case "EXPOSE":
			df.expose = append(df.expose, strings.Fields(rest)...)
		case "ENV":
			k, v, _ := strings.Cut(rest, "=")
			df.env[k] = v
		}
	}
	if df.tag == "" || len(df.entrypoint) == 0 {
		t.Fatalf("the Dockerfile names no image (docker build -t NAME .) or no ENTRYPOINT: %+v", df)
	}
	return df
}

// serveSource is the file where `lockd serve` declares its flags and
// reads its variables.
const serveSource = "../cmd/lockd/serve.go"

// serveFlags are the flag names parseServe declares on its flag set,
// read from its source: the Go source is where the flags are, and a flag
// declared in a way this does not understand fails the test.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	fn := parseFunc(t, serveSource, "parseServe")
	// The position of the name among each flag.FlagSet method's arguments.
	nameArg := map[string]int{"String": 0, "Bool": 0, "Int": 0, "Int64": 0, "Uint": 0, "Uint64": 0, "Float64": 0, "Duration": 0,
		"Func": 0, "BoolFunc": 0, "StringVar": 1, "BoolVar": 1, "IntVar": 1, "Int64Var": 1, "UintVar": 1, "Uint64Var": 1,
		"Float64Var": 1, "DurationVar": 1, "Var": 1, "TextVar": 1}
	flags := map[string]bool{}
	ast.Inspect(fn, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		i, isFlag := nameArg[sel.Sel.Name]
		if x, _ := sel.X.(*ast.Ident); !isFlag || x == nil || x.Name != "fs" {
			return true
		}
		lit, ok := call.Args[i].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			t.Fatalf("%s: fs.%s declares a flag whose name is not a string literal", serveSource, sel.Sel.Name)
		}
		name, _ := strconv.Unquote(lit.Value)
		flags[name] = true
		return true
	})
	if len(flags) < 20 || !flags["listen"] || !flags["redis"] || !flags["auth-file"] {
		t.Fatalf("read %d flags of lockd serve from %s: %v", len(flags), serveSource, flags)
	}
	return flags
}

// serveVariables are the variables lockd serve reads: LOCKD_<FLAG> for
// each flag, and those it names in its source (LOCKD_SESSION_SECRET, …).
func serveVariables(t *testing.T) map[string]bool {
	t.Helper()
	vars := map[string]bool{}
	for f := range serveFlags(t) {
		vars["LOCKD_"+strings.ToUpper(strings.ReplaceAll(f, "-", "_"))] = true
	}
	b, err := os.ReadFile(serveSource)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range regexp.MustCompile(`"(LOCKD_[A-Z0-9_]+)"`).FindAllSubmatch(b, -1) {
		vars[string(v[1])] = true
	}
	return vars
}

func parseFunc(t *testing.T, file, name string) *ast.FuncDecl {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == name {
			return fn
		}
	}
	t.Fatalf("%s has no func %s", file, name)
	return nil
}
