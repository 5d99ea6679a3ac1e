package watchtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/wolf-investigator/wolf/internal/testutil"
	"github.com/wolf-investigator/wolf/internal/testutil/wolfcli"
)

// tlsFiles makes a CA and a server certificate for 127.0.0.1 signed by
// it, and returns the paths of the CA certificate, the server
// certificate and its key.
func tlsFiles(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "wolf test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "wolf watch"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server.key", "EC PRIVATE KEY", keyDER)
}

// The test: wolf watch serves its metrics over TLS with basic
// auth from a --web.config.file (the exporters' format), and a real
// Prometheus scrapes it with the CA made here; plain HTTP, no password and
// a wrong one are refused.
func TestWatchServesTLSToPrometheus(t *testing.T) {
	testutil.RequireRoot(t)
	prom := testutil.RequireTool(t, "prometheus")
	testutil.Exclusive(t) // loads hung's programs: tests that count them must not see these

	dir := t.TempDir()
	ca, cert, key := tlsFiles(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := filepath.Join(dir, "web.yml")
	cfg := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  prom: %s\n", cert, key, hash)
	if err := os.WriteFile(webCfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(wolfBin, "watch", "--listen", "127.0.0.1:0", "--investigators", "hung", "--interval", "2s", "--web.config.file", webCfg)
	var out, errb wolfcli.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addrRE := regexp.MustCompile(`metrics on ([0-9.]+:[0-9]+)/metrics \(TLS and auth per `)
	var addr string
	wolfcli.WaitFor(t, "wolf watch to listen", 15*time.Second, func() bool {
		if m := addrRE.FindStringSubmatch(errb.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})

	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(ca)
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	status := func(user, pass string) int {
		req, _ := http.NewRequest("GET", "https://"+addr+"/metrics", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET over TLS: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := status("", ""); s != http.StatusUnauthorized {
		t.Errorf("no password: %d, want 401", s)
	}
	if s := status("prom", "wrong"); s != http.StatusUnauthorized {
		t.Errorf("wrong password: %d, want 401", s)
	}
	if s := status("prom", "s3cret"); s != http.StatusOK {
		t.Errorf("right password: %d, want 200", s)
	}
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP served the metrics")
		}
	}

	pcfg := fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: wolf
    scheme: https
    tls_config:
      ca_file: %s
    basic_auth:
      username: prom
      password: s3cret
    static_configs:
      - targets: [%q]
`, ca, addr)
	base, promLog := startPrometheus(t, prom, pcfg)
	deadline := time.Now().Add(40 * time.Second)
	for {
		up, ok1 := promQuery(t, base, `up{job="wolf"}`)
		info, ok2 := promQuery(t, base, `wolf_build_info{job="wolf"}`)
		if ok1 && ok2 && up == 1 && info == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus did not scrape wolf over TLS: up=%v (%v), wolf_build_info=%v (%v); prometheus log:\n%s\nwolf stderr:\n%s",
				up, ok1, info, ok2, promLog.String(), errb.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if strings.Contains(errb.String(), "level=ERROR") {
		t.Errorf("wolf logged errors:\n%s", errb.String())
	}
}

// A web configuration that cannot work is bad usage, said before anything
// starts.
func TestWatchRefusesBadWebConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(bad, []byte("tls_server_config:\n  cert_file: /nonexistent.pem\n  key_file: /nonexistent.key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{bad, filepath.Join(dir, "missing.yml")} {
		r := runWolf(t, 10*time.Second, "watch", "--web.config.file", p)
		code, stderr := r.Code, r.Stderr
		if code != exitUsage || !strings.Contains(stderr, "--web.config.file") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%s: exit %d, stderr %q; want 2 and one line", p, code, stderr)
		}
	}
}

// Incident flags that cannot work are bad usage, said before anything
// starts.
func TestWatchRefusesBadIncidentFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--incidents", file},
		{"--incidents", "/nonexistent/dir/incidents"},
		{"--incidents-max", "0"},
		{"--incidents-max-mib", "0"},
		{"--incidents-interval", "-1s"},
	} {
		r := runWolf(t, 10*time.Second, append([]string{"watch"}, args...)...)
		if r.Code != exitUsage || strings.Count(strings.TrimSpace(r.Stderr), "\n") > 0 || !strings.Contains(r.Stderr, "--incidents") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", args, r.Code, r.Stderr)
		}
	}
}
