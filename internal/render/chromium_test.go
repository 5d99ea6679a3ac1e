package render

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

// Chromium on two busy cores starts in a second or three; a minute is
// for a machine under load, not for the page.
const browserTimeout = 60 * time.Second

func writePage(t *testing.T, page string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The report in a real browser: no console message (the page's script
// logs only when something is wrong, and the browser logs refused fetches,
// refused scripts and uncaught exceptions), hostile strings shown as text,
// every flame graph drawn. A screenshot is kept for people to look at.
func TestHTMLInChromium(t *testing.T) {
	bin := testutil.Chromium(t)
	r := hostileReport()
	path := writePage(t, renderHTML(t, r))
	shot := testutil.ArtifactPath(t, "report.png")
	os.Remove(shot)
	p := testutil.OpenHeadless(t, bin, path, shot, browserTimeout)
	if len(p.Console) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(p.Console, "\n"))
	}
	if !strings.Contains(p.DOM, `data-wolf-js="ok"`) {
		t.Error("the page's script did not finish")
	}
	if n := strings.Count(p.DOM, `data-ready="1"`); n != len(r.Profiles) {
		t.Errorf("%d flame graphs ready, want %d", n, len(r.Profiles))
	}
	for _, m := range regexp.MustCompile(`data-drawn="(\d+)"`).FindAllStringSubmatch(p.DOM, -1) {
		if m[1] == "0" {
			t.Error("a flame graph drew no frame")
		}
	}
	if strings.Contains(p.DOM, "<img") {
		t.Error("an img element made it into the document")
	}
	if !strings.Contains(p.DOM, "&lt;img src=x onerror=alert(1)&gt;") {
		t.Error("the hostile comm is not in the document as text")
	}
	if st, err := os.Stat(shot); err != nil || st.Size() == 0 {
		t.Errorf("no screenshot: %v", err)
	} else {
		t.Logf("screenshot: %s", shot)
	}
}

// Zoom and search, driven in the browser by a test script appended to the
// page (and allowed by adding its hash to the page's policy).
func TestHTMLFlameGraphZoomAndSearchInChromium(t *testing.T) {
	bin := testutil.Chromium(t)
	page := renderHTML(t, hostileReport())
	script := `(function () {
  var f = document.getElementById("flame-1");
  var all = f.wolfFlame.search("SCHEDULE");
  var out = { pct: f.getAttribute("data-matched-pct"), matches: f.querySelectorAll("rect.match").length, all: all };
  out.zoomed = f.wolfFlame.zoom(1);
  out.ancestors = f.querySelectorAll("g.ancestor").length;
  out.reset = f.wolfFlame.zoom(0);
  document.documentElement.setAttribute("data-test", JSON.stringify(out));
})();`
	sum := sha256.Sum256([]byte(script))
	hash := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	page = strings.Replace(page, "script-src ", "script-src "+hash+" ", 1)
	page = strings.Replace(page, "</body>", "<script>"+script+"</script></body>", 1)
	p := testutil.OpenHeadless(t, bin, writePage(t, page), "", browserTimeout)
	if len(p.Console) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(p.Console, "\n"))
	}
	m := regexp.MustCompile(`data-test="([^"]*)"`).FindStringSubmatch(p.DOM)
	if m == nil {
		t.Fatal("the test script did not run")
	}
	var got struct {
		Pct                         string
		Matches, All, Zoomed, Reset int
		Ancestors                   int
	}
	if err := json.Unmarshal([]byte(strings.ReplaceAll(m[1], "&quot;", `"`)), &got); err != nil {
		t.Fatalf("%v: %s", err, m[1])
	}
	// blocked_stacks: 6 tasks; "schedule" ends the 3- and the 1-task
	// stacks: 2 frames, 66.7 %. The tree has 11 frames; the first child
	// of the root ([</script>…], 1 task) has 4 below it, plus the root
	// drawn as an ancestor.
	if got.Pct != "66.7" || got.Matches != 2 {
		t.Errorf("search: %s%% in %d frames, want 66.7%% in 2", got.Pct, got.Matches)
	}
	if got.All != 11 || got.Zoomed != 6 || got.Ancestors != 1 || got.Reset != 11 {
		t.Errorf("drawn %d, zoomed %d (%d ancestors), reset %d; want 11, 6 (1), 11", got.All, got.Zoomed, got.Ancestors, got.Reset)
	}
}

// The browser test can fail: a page whose flame data is corrupt, and a
// page with markup injected past the escaping, both leave console
// messages that OpenHeadless reports.
func TestChromiumCatchesBrokenPages(t *testing.T) {
	bin := testutil.Chromium(t)
	page := renderHTML(t, hostileReport())
	corrupt := regexp.MustCompile(`(<script type="application/json" class="flame-data">)[^<]*`).ReplaceAllString(page, "${1}{not json")
	injected := strings.Replace(page, "</main>", `<img src=x onerror="document.title='pwned'"><script>document.title='pwned'</script></main>`, 1)
	for name, pg := range map[string]string{"corrupt flame data": corrupt, "injected markup": injected} {
		p := testutil.OpenHeadless(t, bin, writePage(t, pg), "", browserTimeout)
		t.Logf("%s: console: %q", name, p.Console)
		if len(p.Console) == 0 {
			t.Errorf("%s: no console message; the browser test could not fail", name)
		}
		if strings.Contains(p.DOM, "<title>pwned</title>") {
			t.Errorf("%s: the injected script ran despite the page's policy", name)
		}
		if name == "corrupt flame data" && strings.Contains(p.DOM, `data-wolf-js="ok"`) {
			t.Errorf("%s: the page says all is well", name)
		}
	}
}
