#!/usr/bin/env bash
# A hand-run check of the fake gcloud's Compute Engine slice (no emulated pod: hosts are
# directories and ssh runs bash here). Usage: tests/fake_gcloud/selfcheck_ce.sh
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
GCLOUD="python3 $HERE/gcloud"
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
export FAKE_GCLOUD_ROOT=$DIR FAKE_GCLOUD_WAIT_POLL_S=0.05
mkdir "$DIR/control"
echo '{"zone": "us-central2-b", "project": "podq-test"}' > "$DIR/state.json"
Z=--zone=us-central2-b
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
expect() {  # expect STATUS DESCRIPTION -- command...
  local want=$1 what=$2; shift 3
  local out; out=$("$@" 2>"$DIR/err"); local got=$?
  if [ "$got" = "$want" ]; then ok "$what"; else bad "$what: exit $got, want $want: $(cat "$DIR/err")"; fi
  LAST=$out
}
setstate() { python3 - "$DIR/state.json" "$1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); s.update(json.loads(sys.argv[2])); json.dump(s, open(sys.argv[1], "w"))
PY
}
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
describe() { $GCLOUD compute instance-groups managed describe "$1" $Z --format=json 2>/dev/null; }

expect 0 "workload policy" -- $GCLOUD compute resource-policies create workload-policy wp \
  --region=us-central2 --type=HIGH_THROUGHPUT --accelerator-topology=4x4
expect 1 "workload policy exists" -- $GCLOUD compute resource-policies create workload-policy wp \
  --region=us-central2 --type=HIGH_THROUGHPUT --accelerator-topology=4x4
expect 2 "unknown flag" -- $GCLOUD compute resource-policies create workload-policy wp2 \
  --region=us-central2 --type=HIGH_THROUGHPUT --bogus=1
expect 0 "policy describe" -- $GCLOUD compute resource-policies describe wp --region=us-central2 --format=json
[ "$(echo "$LAST" | field 'd["workloadPolicy"]["acceleratorTopologyMode"]')" = AUTO_CONNECT ] && ok "topology mode" || bad "topology mode"
expect 0 "spot template" -- $GCLOUD compute instance-templates create t-spot \
  --machine-type=ct6e-standard-4t --maintenance-policy=TERMINATE --instance-termination-action=STOP \
  --provisioning-model=SPOT --image-family=ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e \
  --image-project=ubuntu-os-accelerator-images --metadata=a=b --no-address
expect 1 "flex template without max run duration" -- $GCLOUD compute instance-templates create t-bad \
  --machine-type=ct6e-standard-4t --maintenance-policy=TERMINATE --instance-termination-action=DELETE \
  --provisioning-model=FLEX_START --image-family=f --image-project=p
expect 1 "MIG with missing template" -- $GCLOUD compute instance-groups managed create m $Z \
  --template=nope --size=4 --workload-policy=projects/podq-test/regions/us-central2/resourcePolicies/wp \
  --target-size-policy-mode=bulk --default-action-on-vm-failure=do-nothing
expect 1 "MIG without bulk" -- $GCLOUD compute instance-groups managed create m $Z \
  --template=t-spot --size=4 --workload-policy=projects/podq-test/regions/us-central2/resourcePolicies/wp \
  --default-action-on-vm-failure=do-nothing
expect 1 "MIG of the wrong size" -- $GCLOUD compute instance-groups managed create m $Z \
  --template=t-spot --size=2 --workload-policy=projects/podq-test/regions/us-central2/resourcePolicies/wp \
  --target-size-policy-mode=bulk --default-action-on-vm-failure=do-nothing
setstate '{"ce_stockout_checks": 1}'
expect 0 "MIG create" -- $GCLOUD compute instance-groups managed create m $Z \
  --template=t-spot --size=4 --workload-policy=projects/podq-test/regions/us-central2/resourcePolicies/wp \
  --target-size-policy-mode=bulk --default-action-on-vm-failure=do-nothing
expect 0 "list-instances while waiting" -- $GCLOUD compute instance-groups managed list-instances m $Z --format=json
[ "$(echo "$LAST" | field '[x["currentAction"] for x in d if "instanceStatus" not in x].count("CREATING")')" = 4 ] && ok "4 CREATING" || bad "CREATING: $LAST"
[ "$(describe m | field 'd["status"]["bulkInstanceOperation"]["lastProgressCheck"]["error"]["errors"][0]["code"]')" = ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS ] && ok "stockout" || bad "stockout"
setstate '{"ce_quota_exceeded": true}'
[ "$(describe m | field 'd["status"]["bulkInstanceOperation"]["lastProgressCheck"]["error"]["errors"][0]["code"]')" = QUOTA_EXCEEDED ] && ok "quota" || bad "quota"
[ "$(describe m | field 'd["status"]["bulkInstanceOperation"]["inProgress"]')" = True ] && ok "quota waits" || bad "quota waits"
setstate '{"ce_quota_exceeded": false}'
expect 1 "wait-until times out" -- $GCLOUD compute instance-groups managed wait-until m --stable $Z --timeout=0
expect 0 "wait-until stable" -- $GCLOUD compute instance-groups managed wait-until m --stable $Z --timeout=30
V=$(describe m)
[ "$(echo "$V" | field 'd["status"]["appliedAcceleratorTopologies"][0]["state"]')" = ACTIVE ] && ok "ACTIVE" || bad "topology: $V"
[ "$(echo "$V" | field 'd["status"]["currentInstanceStatuses"]')" = "{'running': 4}" ] && ok "4 running" || bad "statuses: $V"
NAMES=$($GCLOUD compute instance-groups managed list-instances m $Z --format=json | field '" ".join(x["name"] for x in d)')
WORKERS=""
for n in $NAMES; do
  w=$($GCLOUD compute instances describe "$n" $Z --format=json | field '[x["value"] for x in d["metadata"]["items"] if x["key"] == "worker-id"][0]')
  WORKERS="$WORKERS $w"
done
[ "$(echo $WORKERS | tr ' ' '\n' | sort | tr '\n' ' ')" = "0 1 2 3 " ] && ok "worker ids $WORKERS" || bad "worker ids $WORKERS"
[ "$(echo $WORKERS)" != "0 1 2 3" ] && ok "name order != worker order" || bad "name order is worker order"
FIRST=$(echo $NAMES | cut -d' ' -f1)
W0=$(echo $WORKERS | cut -d' ' -f1)
$GCLOUD compute instances describe "$FIRST" $Z --format=json | field 'd["metadata"]["items"][-3]["value"]'
expect 1 "ssh without external IP" -- $GCLOUD compute ssh "$FIRST" $Z --command='true'
expect 0 "ssh" -- env PODQ_X=hello $GCLOUD compute ssh "$FIRST" $Z --internal-ip --strict-host-key-checking=no --command='echo $PODQ_X; pwd'
case "$LAST" in *"hosts/host-$W0/home"*) ok "ssh ran on host $W0: $LAST";; *) bad "ssh output: $LAST";; esac
echo data > "$DIR/f.txt"
expect 0 "scp" -- $GCLOUD compute scp --strict-host-key-checking=no --internal-ip "$DIR/f.txt" "$FIRST:~/f.txt" $Z
[ -f "$DIR/hosts/host-$W0/home/f.txt" ] && ok "scp landed" || bad "scp landed"
echo 1 > "$DIR/control/ssh-flaky-$W0"
expect 255 "flaky ssh: no retry" -- $GCLOUD compute ssh "$FIRST" $Z --internal-ip --command='true'
expect 0 "ssh again" -- $GCLOUD compute ssh "$FIRST" $Z --internal-ip --command='true'
expect 3 "remote status" -- $GCLOUD compute ssh "$FIRST" $Z --internal-ip --command='exit 3'
echo '{"in_s": 0, "duration_s": 1}' > "$DIR/control/ce-maintenance-notice"
M=$($GCLOUD compute instances describe "$FIRST" $Z --format=json | field 'd["resourceStatus"]["upcomingMaintenance"]["maintenanceStatus"]')
[ "$M" = PENDING ] || [ "$M" = ONGOING ] && ok "maintenance $M" || bad "maintenance $M"
sleep 1.2
[ "$($GCLOUD compute instances describe "$FIRST" $Z --format=json | field '"resourceStatus" in d')" = False ] && ok "maintenance over" || bad "maintenance over"
echo '{"duration_s": 0.5}' > "$DIR/control/ce-repair"
V=$(describe m)
[ "$(echo "$V" | field 'd["status"]["currentInstanceStatuses"]')" = "{'repairing': 4}" ] && ok "repairing" || bad "repairing: $V"
[ "$(echo "$V" | field 'd["status"]["appliedAcceleratorTopologies"][0]["state"]')" = REACTIVATING ] && ok "REACTIVATING" || bad "not REACTIVATING"
sleep 0.6
V=$(describe m)
[ "$(echo "$V" | field 'd["status"]["isStable"]')" = True ] && ok "repaired" || bad "repaired: $V"
[ "$($GCLOUD compute instance-groups managed list-instances m $Z --format=json | field '" ".join(x["name"] for x in d)')" = "$(echo $NAMES)" ] && ok "same names" || bad "names changed"
echo '{"notice_s": 0.5}' > "$DIR/control/ce-spot-preempt"
[ "$($GCLOUD compute instances describe "$FIRST" $Z --format=json | field 'd["status"]')" = STOPPING ] && ok "STOPPING" || bad "not STOPPING"
[ "$(cat "$DIR/hosts/host-$W0/metadata/instance/preempted")" = TRUE ] && ok "preempted flag" || bad "preempted flag"
sleep 0.6
[ "$($GCLOUD compute instances describe "$FIRST" $Z --format=json | field 'd["status"]')" = TERMINATED ] && ok "TERMINATED" || bad "not TERMINATED"
[ "$(describe m | field 'd["status"]["appliedAcceleratorTopologies"][0]["state"]')" = INCOMPLETE ] && ok "INCOMPLETE" || bad "not INCOMPLETE"
expect 255 "ssh to TERMINATED (internal ip)" -- $GCLOUD compute ssh "$FIRST" $Z --internal-ip --command='true'
expect 1 "template in use" -- $GCLOUD compute instance-templates delete t-spot --quiet
expect 1 "policy in use" -- $GCLOUD compute resource-policies delete wp --region=us-central2 --quiet
expect 2 "delete without --quiet" -- $GCLOUD compute instance-groups managed delete m $Z
expect 0 "MIG delete" -- $GCLOUD compute instance-groups managed delete m $Z --quiet
expect 1 "instance gone" -- $GCLOUD compute instances describe "$FIRST" $Z
expect 1 "MIG gone" -- $GCLOUD compute instance-groups managed describe m $Z
expect 0 "template delete" -- $GCLOUD compute instance-templates delete t-spot --quiet
expect 0 "policy delete" -- $GCLOUD compute resource-policies delete wp --region=us-central2 --quiet

# Flex-start: waits PENDING, runs, vanishes at its max run duration.
expect 0 "policy 2x4" -- $GCLOUD beta compute resource-policies create workload-policy wp8 \
  --region=us-central2 --type=HIGH_THROUGHPUT --accelerator-topology=2x4
expect 0 "flex template" -- $GCLOUD compute instance-templates create t-flex \
  --machine-type=ct6e-standard-4t --maintenance-policy=TERMINATE --instance-termination-action=DELETE \
  --provisioning-model=flex-start --max-run-duration=3s --image-family=f --image-project=p
expect 1 "flex MIG with repair" -- $GCLOUD compute instance-groups managed create f $Z \
  --template=t-flex --size=2 --workload-policy=projects/podq-test/regions/us-central2/resourcePolicies/wp8 \
  --target-size-policy-mode=bulk --default-action-on-vm-failure=repair
setstate '{"ce_instance_order": [0, 1]}'
expect 0 "flex MIG" -- $GCLOUD beta compute instance-groups managed create f $Z \
  --template=t-flex --size=2 --workload-policy=projects/podq-test/regions/us-central2/resourcePolicies/wp8 \
  --target-size-policy-mode=bulk --default-action-on-vm-failure=do-nothing --base-instance-name=vm-###
[ "$(describe f | field 'd["status"]["currentInstanceStatuses"]')" = "{'pending': 2}" ] && ok "flex pending" || bad "flex pending"
[ "$($GCLOUD compute instance-groups managed list-instances f $Z --format=json | field '[x["instanceStatus"] for x in d]')" = "['PENDING', 'PENDING']" ] && ok "PENDING listed" || bad "PENDING listed"
expect 0 "flex wait-until" -- $GCLOUD compute instance-groups managed wait-until f --stable $Z --timeout=30
expect 0 "vm-001 worker 0" -- $GCLOUD compute instances describe vm-001 $Z --format=json
echo "$LAST" | field 'd["metadata"]["items"][0]["value"]'
[ "$(echo "$LAST" | field 'd["scheduling"]["maxRunDuration"]')" = "{'seconds': '3'}" ] && ok "maxRunDuration" || bad "maxRunDuration"
sleep 3.2
expect 0 "list after expiry" -- $GCLOUD compute instance-groups managed list-instances f $Z --format=json
[ "$LAST" = "[]" ] && ok "flex instances vanished" || bad "flex instances: $LAST"
expect 1 "expired instance gone" -- $GCLOUD compute instances describe vm-001 $Z
expect 0 "flex MIG delete" -- $GCLOUD compute instance-groups managed delete f $Z --quiet

# The TPU API path still answers.
setstate '{"node": {"name": "projects/podq-test/locations/us-central2-b/nodes/n", "state": "READY", "acceleratorType": "v4-8", "networkEndpoints": [{"ipAddress": "127.0.0.1", "port": 8470}]}}'
expect 0 "tpu-vm describe" -- $GCLOUD compute tpus tpu-vm describe n $Z --format=json
expect 0 "tpu-vm ssh" -- $GCLOUD compute tpus tpu-vm ssh n $Z --worker=0 --command='echo hi'
echo data > "$DIR/g.txt"
expect 0 "tpu-vm scp" -- $GCLOUD compute tpus tpu-vm scp "$DIR/g.txt" n:~/g.txt $Z --worker=0
[ -f "$DIR/hosts/host-0/home/g.txt" ] && ok "tpu-vm scp landed" || bad "tpu-vm scp landed"
echo "$fails failure(s)"
[ "$fails" = 0 ]
