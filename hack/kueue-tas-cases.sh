#!/usr/bin/env bash
# Regenerates tests/fixtures/kueue-tas-cases.json: the cases of Kueue's own TAS placement test
# (pkg/cache/scheduler/tas_cache_test.go, TestFindTopologyAssignments) that our engine models, as
# data. A copy of Kueue's module (from the Go module cache) gets a few lines in that test that
# write its case table to a file instead of running it; then the cases that need what placement
# here does not model (usage of other pods or flavors, node replacement, pod set groups, elastic
# workloads, feature gates off by default) are left out.
#
# Needs Go and sigs.k8s.io/kueue@$KUEUE_VERSION in the module cache (go mod download).
set -euo pipefail
cd "$(dirname "$0")/.."

KUEUE_VERSION="${KUEUE_VERSION:-v0.19.2}"
src="$(go env GOMODCACHE)/sigs.k8s.io/kueue@${KUEUE_VERSION}"
[ -d "$src" ] || { echo "no $src: run 'go mod download sigs.k8s.io/kueue@${KUEUE_VERSION}'" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$src" "$work/kueue"
chmod -R u+w "$work/kueue"

python3 - "$work/kueue/pkg/cache/scheduler/tas_cache_test.go" <<'EOF'
import sys

path = sys.argv[1]
text = open(path).read()
loop = "\tfor name, tc := range cases {\n\t\tfor _, enableVectorizedRequests := range []bool{true, false} {"
assert text.count(loop) == 1, "TestFindTopologyAssignments changed shape"
dump = '''\tif path := os.Getenv("TAS_DUMP"); path != "" {
\t\ttype dumpPodSet struct {
\t\t\tTopologyRequest *kueue.PodSetTopologyRequest  `json:"topologyRequest,omitempty"`
\t\t\tRequests        map[corev1.ResourceName]int64 `json:"requests"`
\t\t\tCount           int32                         `json:"count"`
\t\t\tTolerations     []corev1.Toleration           `json:"tolerations,omitempty"`
\t\t\tNodeSelector    map[string]string             `json:"nodeSelector,omitempty"`
\t\t\tNodeAffinity    *corev1.NodeAffinity          `json:"nodeAffinity,omitempty"`
\t\t\tGrouped         bool                          `json:"grouped"`
\t\t\tHasPrevious     bool                          `json:"hasPreviousAssignment"`
\t\t\tWantAssignment  *tas.TopologyAssignment       `json:"wantAssignment,omitempty"`
\t\t\tWantReason      string                        `json:"wantReason"`
\t\t}
\t\ttype dumpCase struct {
\t\t\tFeatureGates map[featuregate.Feature]bool `json:"featureGates,omitempty"`
\t\t\tNodes        []corev1.Node                `json:"nodes"`
\t\t\tOtherUsage   bool                         `json:"otherUsage"`
\t\t\tLevels       []string                     `json:"levels"`
\t\t\tNodeLabels   map[string]string            `json:"nodeLabels,omitempty"`
\t\t\tPodSets      []dumpPodSet                 `json:"podSets"`
\t\t}
\t\tout := map[string]dumpCase{}
\t\tfor name, tc := range cases {
\t\t\tc := dumpCase{FeatureGates: tc.featureGates, Nodes: tc.nodes, Levels: tc.levels, NodeLabels: tc.nodeLabels,
\t\t\t\tOtherUsage: len(tc.pods) > 0 || len(tc.aggregatedDomainUsages) > 0 || len(tc.priorFlavorUsage) > 0 ||
\t\t\t\t\tlen(tc.priorOwnUsage) > 0 || tc.workload != nil}
\t\t\tfor _, ps := range tc.podSets {
\t\t\t\tc.PodSets = append(c.PodSets, dumpPodSet{TopologyRequest: ps.topologyRequest, Requests: ps.requests, Count: ps.count,
\t\t\t\t\tTolerations: ps.tolerations, NodeSelector: ps.nodeSelector, NodeAffinity: ps.nodeAffinity,
\t\t\t\t\tGrouped: ps.podSetGroupName != nil, HasPrevious: ps.previousAssignment != nil,
\t\t\t\t\tWantAssignment: ps.wantAssignment, WantReason: ps.wantReason})
\t\t\t}
\t\t\tout[name] = c
\t\t}
\t\tdata, err := json.Marshal(out)
\t\tif err != nil {
\t\t\tt.Fatal(err)
\t\t}
\t\tif err := os.WriteFile(path, data, 0o644); err != nil {
\t\t\tt.Fatal(err)
\t\t}
\t\treturn
\t}
'''
text = text.replace(loop, dump + loop).replace('import (\n\t"fmt"', 'import (\n\t"encoding/json"\n\t"fmt"\n\t"os"', 1)
open(path, "w").write(text)
EOF

(cd "$work/kueue" && TAS_DUMP="$work/cases.json" GOFLAGS=-mod=mod GOPROXY=off \
  go test -count=1 -run '^TestFindTopologyAssignments$' ./pkg/cache/scheduler/ >/dev/null)

python3 - "$work/cases.json" "$KUEUE_VERSION" tests/fixtures/kueue-tas-cases.json <<'EOF'
import json
import sys

source, version, target = sys.argv[1:]
cases = json.load(open(source))
OFF_BY_DEFAULT = {"TASBalancedPlacement", "TASRespectNodeAffinityPreferred", "ElasticJobsViaWorkloadSlices",
                  "ElasticJobsViaWorkloadSlicesWithTAS"}


def modelled(case):
    if case["otherUsage"] or any(ps["grouped"] or ps["hasPreviousAssignment"] for ps in case["podSets"]):
        return False
    gates = case.get("featureGates") or {}
    return all(on == (gate not in OFF_BY_DEFAULT) for gate, on in gates.items())


def node(n):
    return {
        "name": n["metadata"]["name"],
        "labels": n["metadata"].get("labels") or {},
        "allocatable": (n.get("status") or {}).get("allocatable") or {},
        "conditions": [{"type": c["type"], "status": c["status"]} for c in (n.get("status") or {}).get("conditions") or []],
        **({"unschedulable": True} if (n.get("spec") or {}).get("unschedulable") else {}),
        **({"taints": n["spec"]["taints"]} if (n.get("spec") or {}).get("taints") else {}),
    }


def pod_set(ps):
    want = ps.get("wantAssignment")
    out = {k: ps[k] for k in ("topologyRequest", "requests", "count", "tolerations", "nodeSelector", "nodeAffinity") if ps.get(k)}
    out["count"] = ps["count"]
    if want is not None:
        out["wantAssignment"] = {"levels": want["Levels"], "domains": [[*d["Values"], d["Count"]] for d in want["Domains"] or []]}
    if ps["wantReason"]:
        out["wantReason"] = ps["wantReason"]
    return out


kept = {
    name: {"levels": c["levels"], "nodeLabels": c.get("nodeLabels") or {}, "nodes": [node(n) for n in c["nodes"]],
           "podSets": [pod_set(ps) for ps in c["podSets"]]}
    for name, c in sorted(cases.items()) if modelled(c)
}
doc = {"source": f"sigs.k8s.io/kueue@{version} pkg/cache/scheduler/tas_cache_test.go TestFindTopologyAssignments",
       "cases": kept}
with open(target, "w") as out:
    json.dump(doc, out, indent=1, sort_keys=True)
    out.write("\n")
print(f"{target}: {len(kept)} of {len(cases)} cases")
EOF
