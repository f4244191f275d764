#!/usr/bin/env bash
# Start a one-node SLURM cluster on loopback, from scratch and without questions, for the
# cluster test (tests/cluster/test_slurm.py) or to try profiles/slurm by hand:
#
#   sudo tests/cluster/slurm_up.sh            # installs SLURM and munge with apt if missing
#   snakemake --profile profiles/slurm ...    # the node's GPUs are fake: see SPECREJ_SLURM_GPUS
#   sudo tests/cluster/slurm_down.sh          # stops exactly what this started
#
# Everything lives in one state folder ($SPECREJ_SLURM_DIR, default /tmp/specrej-slurm): the
# config (slurm.conf, gres.conf), its own munge key and munged socket, spool, logs and PID files.
# Only /etc/slurm/slurm.conf and gres.conf are links to that folder, because every SLURM command
# inside a job must find the config there: Snakemake's job step (snakemake-executor-plugin-
# slurm-jobstep) drops SLURM_CONF with the other SLURM_* variables before it calls srun. A
# slurm.conf or gres.conf already there is moved aside to *.specrej-backup and slurm_down.sh puts
# it back. A system munged, if any, is left alone (this one has its own socket), and so is a
# system SLURM: if one runs, this refuses to start.
# No systemd, no cgroups, no accounting database: proctrack/linuxproc, jobacct_gather/none,
# accounting_storage/none, and MinJobAge=3600 so that `squeue` still lists a finished job for an
# hour (Snakemake's SLURM plugin reads job states from squeue: profiles/slurm).
#
# Settings (environment):
#   SPECREJ_SLURM_DIR         the state folder (default /tmp/specrej-slurm)
#   SPECREJ_SLURM_PARTITIONS  comma-separated partition names, the first is the default (cpu,gpu:
#                             the names in profiles/slurm); every partition holds the one node
#   SPECREJ_SLURM_GPUS        fake GPUs on the node (default 2, at most 4): gres entries bound to
#                             /dev/null, /dev/zero, ... so that a job asking for --gres=gpu:1 is
#                             scheduled (SLURM sets CUDA_VISIBLE_DEVICES); it sees no real GPU
#   SPECREJ_SLURM_PORT        slurmctld's port (default 16817); slurmd takes the next one
# Up when already up is fine (it checks and returns); a half-up cluster is stopped and restarted.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
STATE="${SPECREJ_SLURM_DIR:-/tmp/specrej-slurm}"
STATE="${STATE%/}"
PARTITIONS="${SPECREJ_SLURM_PARTITIONS:-cpu,gpu}"
GPUS="${SPECREJ_SLURM_GPUS:-2}"
PORT="${SPECREJ_SLURM_PORT:-16817}"
CONF="$STATE/slurm.conf"
ETC=/etc/slurm
MARK="# written by tests/cluster/slurm_up.sh"
export SLURM_CONF="$CONF"

say() { echo "slurm_up: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (it installs packages and starts daemons)"
case "$STATE" in /?*) ;; *) die "SPECREJ_SLURM_DIR must be an absolute path below /: '$STATE'" ;; esac

# running PIDFILE MARK: the PID in PIDFILE is alive and its command line holds MARK (our
# config or socket), so a PID reused by another process never counts as ours.
running() {
    local pid
    [ -s "$1" ] || return 1
    pid="$(cat "$1")"
    [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$2"
}

MUNGE_SOCKET="$STATE/munge/munge.socket"
if running "$STATE/munge/munged.pid" "$MUNGE_SOCKET" && running "$STATE/slurmctld.pid" "$CONF" \
    && running "$STATE/slurmd.pid" "$CONF" && [ "$(readlink "$ETC/slurm.conf" || true)" = "$CONF" ] \
    && scontrol ping 2>/dev/null | grep -q UP; then
    say "already up ($CONF)"
    exit 0
fi
if [ -e "$STATE" ]; then  # half up, or left over: stop what is ours, then start afresh
    if [ -n "$(ls -A "$STATE")" ] && ! grep -qsF "$MARK" "$CONF"; then
        die "$STATE holds files that are not this script's: give SPECREJ_SLURM_DIR an empty or new folder"
    fi
    "$HERE/slurm_down.sh"
fi

# 1. packages: SLURM 22.05 and munge from Debian, only when missing
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
    || ! command -v munged >/dev/null || ! command -v mungekey >/dev/null; then
    command -v apt-get >/dev/null || die "SLURM is not installed and there is no apt-get to install it"
    say "installing slurmctld slurmd slurm-client munge"
    packages=(slurmctld slurmd slurm-client munge)
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null; } \
        || die "apt-get install ${packages[*]} failed"
fi
id munge >/dev/null 2>&1 || die "the munge user is missing (the munge package creates it)"

# 2. no other SLURM daemon (a system one, or this script's with another state folder), and
#    /etc/slurm free: links left by an earlier run are removed, anything else is moved aside
for pid in $(pgrep -x slurmctld || true) $(pgrep -x slurmd || true); do
    [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" = Z ] && continue  # a zombie holds nothing
    die "a SLURM daemon runs that this state folder did not start (PID $pid:" \
        "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)); if it is this script's, stop it with" \
        "SPECREJ_SLURM_DIR=<its folder> $HERE/slurm_down.sh"
done
mkdir -p "$ETC"
for name in slurm.conf gres.conf; do
    target="$ETC/$name"
    if [ -L "$target" ] && grep -qsF "$MARK" "$(dirname "$(readlink "$target")")/slurm.conf"; then
        rm -f "$target"  # our link from an earlier run
    elif [ -e "$target" ] || [ -L "$target" ]; then
        [ -e "$target.specrej-backup" ] && die "$target and $target.specrej-backup both exist: sort them out by hand"
        mv "$target" "$target.specrej-backup"
        say "moved $target aside to $target.specrej-backup (slurm_down.sh restores it)"
    fi
done

# 3. the state folder: munged refuses a socket or key in a folder others can write to
rm -rf "$STATE"
install -d -m 0755 "$STATE" "$STATE/log" "$STATE/ctld" "$STATE/d"
install -d -m 0755 -o munge -g munge "$STATE/munge"
mungekey --create --keyfile="$STATE/munge/munge.key" 2>/dev/null
chown munge:munge "$STATE/munge/munge.key"
chmod 0600 "$STATE/munge/munge.key"

host="$(hostname -s)"
cpus="$(nproc)"
mem_mb=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) * 9 / 10240 ))  # a bit under MemTotal

# Fake GPUs: gres/gpu needs a device file per GPU (without File, slurmd reports 0 and the node
# is marked INVAL); harmless character devices stand in, and no cgroup constrains them.
devices=(/dev/null /dev/zero /dev/full /dev/urandom)
[ "$GPUS" -le "${#devices[@]}" ] || die "SPECREJ_SLURM_GPUS is at most ${#devices[@]}"
gres_node=""
echo "$MARK" >"$STATE/gres.conf"
if [ "$GPUS" -gt 0 ]; then
    gres_node="Gres=gpu:$GPUS"
    for device in "${devices[@]:0:$GPUS}"; do
        echo "NodeName=$host Name=gpu File=$device" >>"$STATE/gres.conf"
    done
fi

cat >"$CONF" <<EOF
$MARK: a one-node cluster on loopback
ClusterName=specrej
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
ReturnToService=2
MinJobAge=3600
GresTypes=gpu
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb $gres_node State=UNKNOWN
EOF
first=1
IFS=',' read -ra names <<<"$PARTITIONS"
for name in "${names[@]}"; do
    default=NO
    [ "$first" = 1 ] && default=YES
    first=0
    echo "PartitionName=$name Nodes=ALL Default=$default MaxTime=INFINITE State=UP" >>"$CONF"
done
ln -s "$CONF" "$ETC/slurm.conf"
ln -s "$STATE/gres.conf" "$ETC/gres.conf"

# 4. the daemons: munged (as munge), slurmctld, slurmd; each writes its PID file in $STATE
runuser -u munge -- /usr/sbin/munged --socket="$MUNGE_SOCKET" --key-file="$STATE/munge/munge.key" \
    --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/munge/munged.log" \
    --seed-file="$STATE/munge/munged.seed" \
    || { say "munged did not start: $(tail -3 "$STATE/munge/munged.log")"; "$HERE/slurm_down.sh"; exit 1; }
/usr/sbin/slurmctld -f "$CONF" \
    || { say "slurmctld did not start: $(tail -5 "$STATE/log/slurmctld.log")"; "$HERE/slurm_down.sh"; exit 1; }
/usr/sbin/slurmd -f "$CONF" \
    || { say "slurmd did not start: $(tail -5 "$STATE/log/slurmd.log")"; "$HERE/slurm_down.sh"; exit 1; }

# 5. wait until the node takes jobs
state=""
for _ in $(seq 60); do
    state="$(sinfo -h -N -o %t 2>/dev/null | head -1 || true)"
    case "$state" in idle*|mix*|alloc*|inval*|drain*) break ;; esac
    sleep 0.5
done
case "$state" in
    idle*|mix*|alloc*) ;;
    *) say "the node is not up (state '${state:-none}'); the logs:"
       tail -n 20 "$STATE/log/slurmctld.log" "$STATE/log/slurmd.log" >&2 || true
       "$HERE/slurm_down.sh"
       exit 1 ;;
esac
say "up: node $host ($cpus CPUs, ${mem_mb} MB, $GPUS fake GPUs), partitions $PARTITIONS, config $CONF"
