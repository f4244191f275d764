#!/usr/bin/env bash
# Stop the one-node SLURM that tests/cluster/slurm_up.sh started: its jobs, then slurmd, then
# slurmctld, then munged, each by the PID in its PID file under the state folder
# ($SPECREJ_SLURM_DIR, default /tmp/specrej-slurm), and only when that process's command line
# names this cluster's config or socket (so a reused PID, or a system SLURM/munge, is never
# touched). Stale PID files are removed, and so are the /etc/slurm links to this state folder
# (a slurm.conf or gres.conf that slurm_up.sh moved aside is put back). Down when already down is
# fine. The state folder (config and logs) stays for reading; slurm_up.sh starts afresh anyway.
set -uo pipefail

STATE="${SPECREJ_SLURM_DIR:-/tmp/specrej-slurm}"
STATE="${STATE%/}"
CONF="$STATE/slurm.conf"
export SLURM_CONF="$CONF"

say() { echo "slurm_down: $*" >&2; }

ours() {  # ours PID MARK: PID is alive and its command line holds MARK
    [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "$2"
}

# stop NAME PIDFILE MARK: TERM, up to 10 s, then KILL; remove the PID file either way
stop() {
    local name="$1" pidfile="$2" mark="$3" pid
    if [ -s "$pidfile" ]; then
        pid="$(cat "$pidfile")"
        if ours "$pid" "$mark"; then
            kill -TERM "$pid" 2>/dev/null
            for _ in $(seq 100); do
                ours "$pid" "$mark" || break
                sleep 0.1
            done
            if ours "$pid" "$mark"; then
                say "$name ($pid) ignored TERM; killing it"
                kill -KILL "$pid" 2>/dev/null
                sleep 0.2
            fi
            say "stopped $name ($pid)"
        fi
    fi
    rm -f "$pidfile"
}

# jobs still running (a test that timed out): cancel them while the controller is up
if [ -s "$STATE/slurmctld.pid" ] && ours "$(cat "$STATE/slurmctld.pid")" "$CONF"; then
    jobs="$(squeue -h -t PENDING,RUNNING,CONFIGURING,COMPLETING,SUSPENDED -o %A 2>/dev/null | tr '\n' ' ')"
    if [ -n "${jobs// /}" ]; then
        say "cancelling jobs $jobs"
        # shellcheck disable=SC2086
        scancel $jobs 2>/dev/null
        for _ in $(seq 50); do
            [ -z "$(squeue -h -t RUNNING,COMPLETING -o %A 2>/dev/null)" ] && break
            sleep 0.2
        done
    fi
fi

stop slurmd "$STATE/slurmd.pid" "$CONF"
stop slurmctld "$STATE/slurmctld.pid" "$CONF"
stop munged "$STATE/munge/munged.pid" "$STATE/munge/munge.socket"

# /etc/slurm: remove the links to this state folder, put back what slurm_up.sh moved aside
for name in slurm.conf gres.conf; do
    target="/etc/slurm/$name"
    if [ -L "$target" ] && [ "$(readlink "$target")" = "$STATE/$name" ]; then
        rm -f "$target"
    fi
    if [ ! -e "$target" ] && [ ! -L "$target" ] && [ -e "$target.specrej-backup" ]; then
        mv "$target.specrej-backup" "$target" && say "restored $target"
    fi
done
exit 0
