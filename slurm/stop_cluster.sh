#!/usr/bin/env bash
# Stop the single-node Slurm cluster that slurm/start_cluster.sh started. Idempotent.
#
# Ends only the daemons named by PID files in $STATEAWARE_SLURM_STATE/pids (default
# /var/run/stateaware-slurm/pids), and only while the PID still belongs to the daemon of
# that name (a PID reused by another process is left alone). Jobs still in the queue are
# cancelled first so their processes do not outlive the cluster. The state dir, configs
# and accounting DB are kept, so the next start is quick; remove $STATEAWARE_SLURM_STATE
# and the three configs it wrote (slurm.conf, gres.conf, slurmdbd.conf beside $SLURM_CONF)
# to start from nothing.
set -euo pipefail

STATE="${STATEAWARE_SLURM_STATE:-/var/run/stateaware-slurm}"
export SLURM_CONF="${SLURM_CONF:-/etc/slurm/slurm.conf}"
# Reverse start order: jobs' node first, the database last.
DAEMONS=(slurmd slurmctld slurmdbd munged mariadbd)
# Seconds a daemon gets after SIGTERM before SIGKILL (MariaDB flushes InnoDB on TERM).
GRACE_S="${STATEAWARE_SLURM_STOP_GRACE_S:-20}"

_log() { printf '[stop_cluster %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# Prints the PID recorded for daemon $1 when that process is alive and is that daemon.
_our_pid() {
    local name="$1" pidfile="$STATE/pids/$1.pid" pid
    [ -s "$pidfile" ] || return 1
    pid="$(tr -dc '0-9' <"$pidfile")"
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
    [ "$(cat "/proc/$pid/comm")" = "$name" ] || return 1
    _running "$pid" || return 1
    echo "$pid"
}

# A zombie (exited, not yet reaped by PID 1) still answers kill -0; it is gone for us.
_running() {
    [ -r "/proc/$1/stat" ] || return 1
    [ "$(sed 's/.*) \(.\).*/\1/' "/proc/$1/stat")" != Z ]
}

_cancel_jobs() {
    local jobs
    _our_pid slurmctld >/dev/null || return 0
    jobs="$(squeue -h -o '%i' 2>/dev/null || true)"
    [ -n "$jobs" ] || return 0
    _log "cancelling $(wc -w <<<"$jobs") queued/running job(s)"
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null || true
    # Wait for the jobs to leave the queue: KillWait is 2 s in our config, but a task
    # started through srun lingers ~7 s in COMPLETING while its step gives up on srun.
    for _ in $(seq 150); do
        [ -z "$(squeue -h -o '%i' 2>/dev/null)" ] && return 0
        sleep 0.1
    done
}

_stop() {
    local name="$1" pid
    if ! pid="$(_our_pid "$name")"; then
        rm -f "$STATE/pids/$name.pid"
        return 0
    fi
    _log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq $((GRACE_S * 10))); do
        _running "$pid" || break
        sleep 0.1
    done
    if _running "$pid"; then
        _log "$name did not stop within ${GRACE_S}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$STATE/pids/$name.pid"
}

main() {
    [ "$(id -u)" = 0 ] || { echo "stop_cluster.sh must run as root" >&2; exit 1; }
    [ -d "$STATE/pids" ] || { _log "nothing to stop ($STATE/pids does not exist)"; return 0; }
    _cancel_jobs
    local d
    for d in "${DAEMONS[@]}"; do _stop "$d"; done
    _log "stopped"
}

main "$@"
