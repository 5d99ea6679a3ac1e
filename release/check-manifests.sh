#!/usr/bin/env bash
# Validates the Kubernetes manifests (deploy/kubernetes and the release's
# dist/wolf-daemonset.yaml) with kubeconform in strict mode (unknown fields
# are errors) against the schemas of two Kubernetes versions, and checks
# that the release's DaemonSet names the image this release built.
#
# kubeconform (pinned in tools/go.mod) downloads its schemas from GitHub
# by default, which this machine cannot reach. The same JSON schemas,
# generated from Kubernetes' OpenAPI documents, ship inside the PyPI
# package kubernetes-validate; they are taken from its wheel (pinned
# below; `pip download`, nothing installed), kept in the cache, and their
# references to the shared definitions made file-relative, the one
# difference between that layout and kubeconform's.
# Exit 0 valid, 1 invalid, 2 cannot run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SCHEMA_PKG=kubernetes-validate==1.37.0
K8S_VERSIONS=${K8S_VERSIONS:-"1.29.0 1.34.0"}
schemas=$CACHE/kubernetes-schemas
if [ ! -f "$schemas/.complete-${SCHEMA_PKG#*==}" ]; then
	need_tool python3 "to download the schemas with pip"
	say "fetching Kubernetes schemas from $SCHEMA_PKG"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	python3 -m pip download --quiet --no-deps --dest "$tmp" "$SCHEMA_PKG" || setup_error "pip download $SCHEMA_PKG failed"
	rm -rf "$schemas.new"
	mkdir -p "$schemas.new"
	for v in $K8S_VERSIONS; do
		python3 - "$tmp"/*.whl "v$v-local-strict" "$schemas.new" <<'PY' || setup_error "no schemas for Kubernetes $v in the wheel"
import json, os, sys, zipfile
wheel, version, out = sys.argv[1:]
prefix = "kubernetes_validate/kubernetes-json-schema/" + version + "/"
n = 0
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if not name.startswith(prefix) or not name.endswith(".json"):
            continue
        doc = json.loads(z.read(name))
        base = name[len(prefix):]
        if base != "_definitions.json":
            # Resolved against "$id" (https://kubernetes.io/api/...), the
            # shared definitions would be fetched from the network.
            doc.pop("$id", None)
        text = json.dumps(doc).replace('"/api/_definitions.json#', '"_definitions.json#')
        os.makedirs(out + "/" + version, exist_ok=True)
        with open(out + "/" + version + "/" + base, "w") as f:
            f.write(text)
        n += 1
if n == 0:
    sys.exit(1)
PY
	done
	rm -rf "$schemas"
	mv "$schemas.new" "$schemas"
	touch "$schemas/.complete-${SCHEMA_PKG#*==}"
fi

kubeconform() {
	local v=$1
	shift
	go tool -modfile="$ROOT/tools/go.mod" kubeconform -strict -summary -kubernetes-version "$v" \
		-schema-location "$schemas/{{ .NormalizedKubernetesVersion }}-local{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json" "$@"
}

manifests=(deploy/kubernetes/*.yaml)
[ -f "$DIST/wolf-daemonset.yaml" ] && manifests+=("$DIST/wolf-daemonset.yaml")
for v in $K8S_VERSIONS; do
	say "kubeconform -strict, Kubernetes $v: ${manifests[*]}"
	kubeconform "$v" "${manifests[@]}" || fail "manifests invalid for Kubernetes $v"
done

# A validator that accepts everything proves nothing: an unknown field and
# a wrong type must both be rejected.
tmp2=$(mktemp -d)
trap 'rm -rf "${tmp:-}" "$tmp2"' EXIT
sed 's/^\( *\)hostPID: true/&\n\1hostPIDs: true/' deploy/kubernetes/wolf-daemonset.yaml >"$tmp2/unknown-field.yaml"
sed 's/containerPort: 9740/containerPort: "9740"/' deploy/kubernetes/wolf-daemonset.yaml >"$tmp2/wrong-type.yaml"
for bad in "$tmp2"/*.yaml; do
	out=$(kubeconform "${K8S_VERSIONS##* }" "$bad" 2>&1) && fail "kubeconform accepted $(basename "$bad" .yaml), a broken copy of the DaemonSet"
	grep -q "DaemonSet wolf-watch is invalid" <<<"$out" || fail "kubeconform failed on $(basename "$bad" .yaml) for another reason: $out"
done
say "broken copies rejected (unknown field, wrong type)"

if [ -f "$DIST/wolf-daemonset.yaml" ]; then
	img=$(sed -n 's/^ *image: *//p' "$DIST/wolf-daemonset.yaml")
	[ "$img" = "$IMAGE_REPO:$VERSION" ] || fail "$DIST/wolf-daemonset.yaml runs $img, the release built $IMAGE_REPO:$VERSION"
	say "the release's DaemonSet runs $img"
fi
say "ok"
