package kubernetes_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/tideml/tide/internal/provider/providertest"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeVersion is the kube-apiserver release the tests run against; the
// binaries come from testdata/kube-binaries.sh.
const kubeVersion = "v1.34.4"

// cluster is a real Kubernetes control plane on loopback, private to the
// test run: etcd and kube-apiserver (RBAC on, a static admin token,
// service-account tokens signed by a key the test made) in a temp dir.
// There is no scheduler, controller-manager or kubelet: the test's
// kubelet (kubelet_test.go) plays their parts.
type cluster struct {
	dir   string
	url   string
	ca    []byte
	procs []*proc
	// admin is a client with system:masters rights.
	admin *clientset.Clientset
	// kubeconfig authenticates as the ServiceAccount of
	// deploy/kubernetes/rbac.yaml: what the provider runs as.
	kubeconfig string
	kubelet    *kubelet
}

// binaries returns the folder with kube-apiserver and etcd, building them
// with testdata/kube-binaries.sh when they are missing.
func binaries() (string, error) {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(home, ".cache")
	}
	dir := filepath.Join(cache, "tide", "kube", kubeVersion)
	if isExec(filepath.Join(dir, "kube-apiserver")) && isExec(filepath.Join(dir, "etcd")) {
		return dir, nil
	}
	if _, err := exec.LookPath("go"); err != nil {
		return "", fmt.Errorf("kube-apiserver and etcd are not in %s and go is not on PATH to build them", dir)
	}
	fmt.Fprintf(os.Stderr, "building kube-apiserver %s and etcd into %s (one time, several minutes)...\n", kubeVersion, dir)
	start := time.Now()
	cmd := exec.Command("bash", "testdata/kube-binaries.sh")
	cmd.Env = append(os.Environ(), "KUBE_VERSION="+kubeVersion)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("testdata/kube-binaries.sh: %w\n%s", err, tail(out.String(), 3000))
	}
	fmt.Fprintf(os.Stderr, "built kube-apiserver and etcd in %s\n", time.Since(start).Round(time.Second))
	return dir, nil
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&0o111 != 0
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// adminToken is the static token of the test's admin (system:masters).
const adminToken = "tide-test-admin-token"

func startCluster() (_ *cluster, err error) {
	if runtime.GOOS != "linux" {
		return nil, errors.New("the test control plane runs on Linux only")
	}
	bin, err := binaries()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tide-kube-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	for _, d := range []string{"etcd", "certs", "log", "pods"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	ports, err := providertest.FreePorts(3)
	if err != nil {
		return nil, err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	if err := c.start("etcd", filepath.Join(bin, "etcd"), "--name=tide", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL, "--initial-cluster=tide="+peerURL,
		"--log-level=warn", "--unsafe-no-fsync"); err != nil {
		return nil, err
	}

	// The service-account signing key: TokenRequest needs one.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	saKey, saPub := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return nil, err
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(adminToken+",tide-test-admin,tide-test-admin,system:masters\n"), 0o600); err != nil {
		return nil, err
	}
	c.url = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	if err := c.start("kube-apiserver", filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", ports[2]),
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--authorization-mode=RBAC",
		"--token-auth-file="+tokens,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+saPub, "--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range=10.96.0.0/24",
		"--enable-priority-and-fairness=false", "--profiling=false",
		"--v=1"); err != nil {
		return nil, err
	}
	if err := c.waitReady(60 * time.Second); err != nil {
		return nil, err
	}
	c.admin, err = clientset.NewForConfig(c.restConfig(adminToken))
	if err != nil {
		return nil, err
	}
	if err := c.setup(context.Background()); err != nil {
		return nil, err
	}
	c.kubelet = startKubelet(c.admin, filepath.Join(dir, "pods"))
	return c, nil
}

func (c *cluster) restConfig(token string) *rest.Config {
	return &rest.Config{Host: c.url, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: c.ca}, QPS: 100, Burst: 200}
}

// waitReady polls /readyz until the API server answers ok, reading its
// self-signed certificate (the CA) once it has written it.
func (c *cluster) waitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	var last string
	for time.Now().Before(deadline) {
		if c.ca == nil {
			c.ca, _ = os.ReadFile(filepath.Join(c.dir, "certs", "apiserver.crt"))
		}
		if c.ca != nil {
			rc := c.restConfig(adminToken)
			tr, err := rest.TransportFor(rc)
			if err != nil {
				return err
			}
			resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(c.url + "/readyz")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
				last = string(b)
			} else {
				last = err.Error()
			}
		}
		for _, p := range c.procs {
			if p.exited() {
				return fmt.Errorf("%s exited: %s", p.name, c.log(p.name))
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("kube-apiserver not ready after %s: %s\n%s", d, last, c.log("kube-apiserver"))
}

func (c *cluster) log(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "log", name+".out"))
	return tail(string(b), 3000)
}

// setup applies deploy/kubernetes/rbac.yaml, plays the controller-manager
// (the namespaces' default ServiceAccounts) and the node's registration,
// and writes a kubeconfig for the tide ServiceAccount from a TokenRequest.
func (c *cluster) setup(ctx context.Context) error {
	if err := apply(ctx, c.admin, "../../../deploy/kubernetes/rbac.yaml"); err != nil {
		return fmt.Errorf("applying rbac.yaml: %w", err)
	}
	// A namespace tide is not allowed to write to.
	if _, err := c.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, ns := range []string{providerNS, "other"} {
		// The ServiceAccount admission plugin wants the default account
		// the controller-manager would have made.
		if _, err := c.admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{"kubernetes.io/hostname": testNode, poolLabel: "main"}},
	}
	if _, err := c.admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return err
	}
	tr, err := c.admin.CoreV1().ServiceAccounts(providerNS).CreateToken(ctx, "tide", &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: new(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for the tide ServiceAccount: %w", err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: c.url, CertificateAuthorityData: c.ca}
	kc.AuthInfos["tide"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["tide@test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "tide", Namespace: providerNS}
	kc.CurrentContext = "tide@test"
	c.kubeconfig = filepath.Join(c.dir, "kubeconfig")
	return clientcmd.WriteToFile(*kc, c.kubeconfig)
}

// apply creates the objects of a manifest file (the kinds rbac.yaml uses).
func apply(ctx context.Context, cs *clientset.Clientset, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return err
		}
		switch o := obj.(type) {
		case *corev1.Namespace:
			_, err = cs.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			err = fmt.Errorf("unexpected kind %T", obj)
		}
		if err != nil {
			return err
		}
	}
}

// proc is a daemon; done closes when it exits.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// start runs a daemon, logging to log/<name>.out.
func (c *cluster) start(name, bin string, args ...string) error {
	out, err := os.Create(filepath.Join(c.dir, "log", name+".out"))
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	c.procs = append(c.procs, p)
	go func() { _ = cmd.Wait(); close(p.done) }()
	return nil
}

// stop stops the kubelet's agents, then the daemons in reverse order.
func (c *cluster) stop() {
	if c.kubelet != nil {
		c.kubelet.stop()
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	os.RemoveAll(c.dir)
}
