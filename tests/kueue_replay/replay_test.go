// Kueue's own scheduler, run for N consecutive cycles over each state a JSON file describes, for
// the differential test tests/unit/test_same_decisions_as_kueue.py. The file is copied into a
// copy of Kueue's pkg/scheduler (package scheduler, to reach its unexported cycle) and built
// there with `go test -c`; nothing of Kueue's enters this repository.
//
// Input (REPLAY_IN): [{"now": RFC 3339, "objects": [Namespace | ResourceFlavor | ClusterQueue |
// Cohort | LocalQueue | Workload, as JSON of kueue.x-k8s.io/v1beta2], "cycles": N,
// "fairSharing": bool, "prioritizePreemptors": bool (absent: true)}, ...].
// Output (REPLAY_OUT): one result per state, in order: the workloads the cycles gave quota
// ("ns/name" -> ClusterQueue) and the workloads they preempted ("ns/name" -> the preemptor's
// "ns/name"), read back from the fake API server's objects after the last cycle.
package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	config "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	qcache "sigs.k8s.io/kueue/pkg/cache/queue"
	schdcache "sigs.k8s.io/kueue/pkg/cache/scheduler"
	"sigs.k8s.io/kueue/pkg/features"
	preemptexpectations "sigs.k8s.io/kueue/pkg/scheduler/preemption/expectations"
	"sigs.k8s.io/kueue/pkg/util/routine"
	utiltesting "sigs.k8s.io/kueue/pkg/util/testing"
)

type replayState struct {
	Now     time.Time         `json:"now"`
	Objects []json.RawMessage `json:"objects"`
	// Consecutive cycles with nothing answered in between (the cache sees its own
	// assumptions, not the evictions' writes); they stop early once no head is queued.
	Cycles int `json:"cycles"`
	// Kueue's Configuration fairSharing, with its default strategies.
	FairSharing bool `json:"fairSharing"`
	// Kueue's PrioritizePreemptorWorkloads gate (alpha, off by default in v0.19.2); absent: on,
	// as the engine has it by default.
	PrioritizePreemptors *bool `json:"prioritizePreemptors"`
}

type replayResult struct {
	Admitted  map[string]string `json:"admitted"`
	Preempted map[string]string `json:"preempted"`
	Error     string            `json:"error,omitempty"`
}

var preemptorUID = regexp.MustCompile(`\(UID: ([^,)]+)`)

func TestReplay(t *testing.T) {
	in, out := os.Getenv("REPLAY_IN"), os.Getenv("REPLAY_OUT")
	if in == "" || out == "" {
		t.Skip("REPLAY_IN and REPLAY_OUT name the states and the results")
	}
	data, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	var states []replayState
	if err := json.Unmarshal(data, &states); err != nil {
		t.Fatalf("%s: %v", in, err)
	}
	results := make([]replayResult, 0, len(states))
	for i := range states {
		prioritize := states[i].PrioritizePreemptors == nil || *states[i].PrioritizePreemptors
		features.SetFeatureGateDuringTest(t, features.PrioritizePreemptorWorkloads, prioritize)
		result, err := replayOne(t, states[i])
		if err != nil {
			result = replayResult{Error: err.Error()}
		}
		results = append(results, result)
	}
	encoded, err := json.Marshal(results)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, encoded, 0o644); err != nil {
		t.Fatal(err)
	}
}

type replayObjects struct {
	namespaces []client.Object
	flavors    []*kueue.ResourceFlavor
	queues     []kueue.ClusterQueue
	cohorts    []kueue.Cohort
	local      []kueue.LocalQueue
	workloads  []kueue.Workload
}

// into decodes one object and appends it to its kind's list.
func into[T any](item json.RawMessage, list *[]T) error {
	var obj T
	err := json.Unmarshal(item, &obj)
	*list = append(*list, obj)
	return err
}

func decode(raw []json.RawMessage) (*replayObjects, error) {
	objs := &replayObjects{}
	var namespaces []corev1.Namespace
	var flavors []kueue.ResourceFlavor
	for _, item := range raw {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(item, &head); err != nil {
			return nil, err
		}
		var err error
		switch head.Kind {
		case "Namespace":
			err = into(item, &namespaces)
		case "ResourceFlavor":
			err = into(item, &flavors)
		case "ClusterQueue":
			err = into(item, &objs.queues)
		case "Cohort":
			err = into(item, &objs.cohorts)
		case "LocalQueue":
			err = into(item, &objs.local)
		case "Workload":
			err = into(item, &objs.workloads)
		default:
			return nil, fmt.Errorf("kind %q is not replayed", head.Kind)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", head.Kind, err)
		}
	}
	for i := range namespaces {
		objs.namespaces = append(objs.namespaces, &namespaces[i])
	}
	for i := range flavors {
		objs.flavors = append(objs.flavors, &flavors[i])
	}
	return objs, nil
}

func replayOne(t *testing.T, state replayState) (replayResult, error) {
	objs, err := decode(state.Objects)
	if err != nil {
		return replayResult{}, err
	}
	ctx, log := utiltesting.ContextWithLog(t)
	cl := utiltesting.NewClientBuilder().
		WithLists(&kueue.WorkloadList{Items: objs.workloads}, &kueue.LocalQueueList{Items: objs.local}).
		WithObjects(objs.namespaces...).
		WithStatusSubresource(&kueue.Workload{}).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: utiltesting.TreatSSAAsStrategicMerge}).
		Build()
	cache := schdcache.New(cl)
	queues := qcache.NewManagerForUnitTests(cl, cache)
	for i := range objs.local {
		if err := queues.AddLocalQueue(ctx, &objs.local[i]); err != nil {
			return replayResult{}, fmt.Errorf("LocalQueue %s: %w", objs.local[i].Name, err)
		}
	}
	for _, rf := range objs.flavors {
		cache.AddOrUpdateResourceFlavor(log, rf)
	}
	for i := range objs.queues {
		cq := &objs.queues[i]
		if err := cache.AddClusterQueue(ctx, cq); err != nil {
			return replayResult{}, fmt.Errorf("ClusterQueue %s: %w", cq.Name, err)
		}
		if err := queues.AddClusterQueue(ctx, cq); err != nil {
			return replayResult{}, fmt.Errorf("ClusterQueue %s: %w", cq.Name, err)
		}
	}
	for i := range objs.cohorts {
		if err := cache.AddOrUpdateCohort(&objs.cohorts[i]); err != nil {
			return replayResult{}, fmt.Errorf("Cohort %s: %w", objs.cohorts[i].Name, err)
		}
	}
	var fairSharing *config.FairSharing
	if state.FairSharing {
		fairSharing = &config.FairSharing{}
	}
	recorder := &utiltesting.EventRecorder{}
	scheduler := New(queues, cache, cl, recorder, WithFairSharing(fairSharing),
		WithClock(t, testingclock.NewFakeClock(state.Now)), WithPreemptionExpectations(preemptexpectations.New()))
	wg := sync.WaitGroup{}
	scheduler.setAdmissionRoutineWrapper(routine.NewWrapper(func() { wg.Add(1) }, func() { wg.Done() }))
	// The loop below never waits on Heads (it stops when nothing is queued); the deadline only
	// keeps a broken state from hanging the whole run.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go queues.CleanUpOnContext(ctx)
	for cycle := 0; cycle < max(state.Cycles, 1); cycle++ {
		if len(queues.Dump()) == 0 {
			break // Heads would wait for a workload to be queued
		}
		scheduler.schedule(ctx)
		wg.Wait()
	}

	before := map[string]kueue.Workload{}
	keys := map[string]string{}
	for _, wl := range objs.workloads {
		key := wl.Namespace + "/" + wl.Name
		before[key] = wl
		keys[string(wl.UID)] = key
	}
	after := &kueue.WorkloadList{}
	if err := cl.List(ctx, after); err != nil {
		return replayResult{}, err
	}
	result := replayResult{Admitted: map[string]string{}, Preempted: map[string]string{}}
	for _, wl := range after.Items {
		key := wl.Namespace + "/" + wl.Name
		old := before[key]
		if apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved) &&
			!apimeta.IsStatusConditionTrue(old.Status.Conditions, kueue.WorkloadQuotaReserved) && wl.Status.Admission != nil {
			result.Admitted[key] = string(wl.Status.Admission.ClusterQueue)
		}
		evicted := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted)
		if evicted != nil && evicted.Status == "True" && evicted.Reason == kueue.WorkloadEvictedByPreemption &&
			!apimeta.IsStatusConditionTrue(old.Status.Conditions, kueue.WorkloadEvicted) {
			by := ""
			if m := preemptorUID.FindStringSubmatch(evicted.Message); m != nil {
				by = keys[m[1]]
			}
			result.Preempted[key] = by
		}
	}
	return result, nil
}
