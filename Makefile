# Entry points; the scripts in hack/ do the work.
.PHONY: test crds rbac envtest cluster e2e chaos bench bench-cluster kind kueue-harness

test:  ## everything CI checks: lint, types, CRDs, unit and e2e tests
	hack/test.sh

crds:  ## regenerate crds/ (and the Helm chart's copy) from the API models
	preemption-operator crds
	preemption-operator crds --output-dir charts/preemption-operator/crds

rbac:  ## regenerate the operator's ClusterRole (and the Helm chart's copy) from what it does and the job integrations
	preemption-operator rbac
	preemption-operator rbac --output charts/preemption-operator/templates/clusterrole.yaml

envtest:  ## build or reuse kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kubectl and kwok; prints their folder
	hack/setup-envtest.sh

cluster:  ## a cluster on this machine: kube-scheduler and 8 kwok nodes (2 blocks of 2 racks, labelled for the examples) whose pods run; kubeconfig in cluster.kubeconfig
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" python hack/cluster.py --kubeconfig cluster.kubeconfig --nodes 8 \
		--topology blocks=2,racks-per-block=2 --node-labels example.com/pool=on-demand

e2e:  ## only the tests against a real kube-apiserver
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" pytest tests/e2e

chaos:  ## the chaos soak (~10 min): every fault family, >= 20 kills; results go to benchmarks/results/chaos.md
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" python benchmarks/chaos_soak.py

bench:  ## engine benchmarks; results go to benchmarks/results/
	python benchmarks/engine.py

bench-cluster:  ## the cluster-outcome benchmark (~25 min; pip install -e '.[bench]'): one trace of GPU jobs on Kueue v0.19.2 and on this operator, kwok nodes; results go to benchmarks/results/cluster.md
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" python benchmarks/cluster/bench.py

kind:  ## a kind cluster with the operator and an example (needs Docker)
	hack/kind-up.sh

kueue-harness:  ## build Kueue v0.19.2's scheduler-perf runner, minimalkueue and checker (Go module proxy) into ~/.cache/preemption-operator/kueue-harness; run: python benchmarks/kueue-harness/harness.py
	python benchmarks/kueue-harness/harness.py --build-only
