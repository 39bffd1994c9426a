"""bench/routing.py's figures: per-phase summaries, the Markdown report and the plot (matplotlib, pinned in
pyproject.toml). Pure but for the plot's file."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any


def _quantile(values: list[float], q: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def summary(records: list[Any]) -> dict[str, Any]:
    """Count, failures, TTFT (streamed) and latency p50/p99 of some Records (bench/routing.py)."""
    ok = [r for r in records if r.error is None]
    out: dict[str, Any] = {"n": len(records), "failed": len(records) - len(ok)}
    ttfts = sorted(r.ttft for r in ok if r.ttft is not None)
    if ttfts:
        out |= {"ttft_p50_s": round(statistics.median(ttfts), 4), "ttft_p99_s": round(_quantile(ttfts, 99), 4)}
    latencies = sorted(r.end - r.start for r in ok)
    if latencies:
        out |= {"latency_p50_s": round(statistics.median(latencies), 4),
                "latency_p99_s": round(_quantile(latencies, 99), 4)}
    errors = [r.error for r in records if r.error is not None]
    if errors:
        out["errors"] = errors[:3]
    return out


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def _short_ratio(b: dict[str, Any], q: str) -> str:
    pooled = b["pooled"]
    return _ratio(pooled["with"]["short"].get(f"ttft_{q}_s"), pooled["without"]["short"].get(f"ttft_{q}_s"))


def _table_a(a: dict[str, Any]) -> list[str]:
    rows = ["| routing | requests (failed) | prefix-cache hit rate | TTFT p50 s | TTFT p99 s | requests per server "
            "| prefixes on 1 / 2 servers | preemptions | s |", "|" + " --- |" * 9]
    for mode, m in a.items():
        per = " / ".join(str(v) for _, v in sorted(m["per_server"].items()))
        spread = m["servers_per_prefix"]
        rows.append(f"| {mode} | {m['n']} ({m['failed']}) | {m['hit_rate']} | {m.get('ttft_p50_s', '-')} | "
                    f"{m.get('ttft_p99_s', '-')} | {per} | {spread.get('1', 0)} / {spread.get('2', 0)} | "
                    f"{_num(m.get('preemptions'))} | {m['seconds']} |")
    return rows


def _table_b(b: dict[str, Any]) -> list[str]:
    rows = ["| run | classes | short n (failed) | short TTFT p50 s | short TTFT p99 s | long n (failed) | long per s | "
            "long latency p50 s | long latency p99 s | preemptions | largest waiting queue per server |",
            "|" + " --- |" * 11]
    for m in b["runs"]:
        sh, lo = m["short"], m["long"]
        queue = " / ".join(f"{v:g}" for _, v in sorted(m["max_waiting"].items()))
        rows.append(f"| {m['repeat']} | {m['classes']} | {sh['n']} ({sh['failed']}) | {sh.get('ttft_p50_s', '-')} | "
                    f"{sh.get('ttft_p99_s', '-')} | {lo['n']} ({lo['failed']}) | {lo.get('per_s', '-')} | "
                    f"{lo.get('latency_p50_s', '-')} | {lo.get('latency_p99_s', '-')} | {_num(m.get('preemptions'))} "
                    f"| {queue} |")
    for key, m in b["pooled"].items():
        sh, lo = m["short"], m["long"]
        rows.append(f"| all | **{key}** | {sh['n']} ({sh['failed']}) | **{sh.get('ttft_p50_s', '-')}** | "
                    f"**{sh.get('ttft_p99_s', '-')}** | {lo['n']} ({lo['failed']}) | {lo.get('per_s', '-')} | "
                    f"{lo.get('latency_p50_s', '-')} | {lo.get('latency_p99_s', '-')} | | |")
    return rows


def _restarts(c: dict[str, Any]) -> str:
    return "; ".join(f"ready {x['server_start_s']} s after its start, back in the picker {x['seconds']} s after "
                     "the restart began" for x in c.get("restarts", [])) or "not restarted"


def _per_run(c: dict[str, Any], key: str) -> str:
    return ", ".join(f"{run['name']} {run.get(key)}" for run in c["runs"])


def _row_c(k: dict[str, Any]) -> str:
    retried, errors = k["retried_by_reason"], ", ".join(f"{e} {n}" for e, n in k["errors"]) or "none"
    return (f"| {k['name']} | `{k['retry_on']}` | {k['requests']} | {k['failed']} | "
            f"{k['in_flight_on_victim_at_kill']}: {k['failed_in_flight_at_kill']} / "
            f"{k['served_by_fallback_in_flight_at_kill']} | **{k['failed_beyond_in_flight']}** | "
            f"{retried['connect-failure']} / {retried['reset-before-response']} | {k['served_by_fallback']} | "
            f"{k['picked_victim_first_after_kill']} | {k['sent_to_victim_while_dying']} "
            f"({k.get('seconds_kill_to_refusing')}) | {k['seconds_kill_to_not_ready']} | "
            f"{k['seconds_kill_to_dropped']} | {k['picks_of_victim_after_drop']} ({k['requests_after_drop']}) | "
            f"{errors} |")


def markdown(r: dict[str, Any]) -> str:
    s, a, b, c = r["settings"], r["phase_a"], r["phase_b"], r["phase_c"]
    c0 = c["runs"][0]
    cache = r["server_cache"]
    kv_tokens = int(cache["num_gpu_blocks"]) * int(cache["block_size"]) if cache.get("num_gpu_blocks") else "?"
    lines = [
        f"# Routing: the real endpoint picker vs a plain Service (tiny Qwen2, vLLM {r['vllm']} CPU, EPP "
        f"{r['epp']}, {r['cpus']} CPUs, {r['when']})", "",
        "Two vLLM CPU servers from the rendered Deployment (`--scheduling-policy priority`, prefix caching, "
        f"`--num-gpu-blocks-override {s['kv_blocks']}`: {cache.get('num_gpu_blocks')} blocks of "
        f"{cache.get('block_size')} tokens = {kv_tokens} tokens of KV cache each), the real picker (cmd/epp "
        f"{r['epp']}, rendered flags and config, scorers queue 2 / KV cache 2 / prefix 3) driven through ext-proc "
        "as a gateway does (tests/support/extproc.py), a local apiserver with KWOK pods at the servers' "
        "addresses. Produced by `make bench-routing` (bench/routing.py); one run, same servers throughout. "
        f"Each server's processes pinned to one CPU of their own ({r.get('engine_cpu') or 'not pinned'}): left "
        "alone, vLLM's automatic OMP binding puts both engines' compute threads on the same CPU here.", "",
        "## A. Shared prefixes: prefix-cache hit rate and TTFT", "",
        f"Workload: {s['prefixes']} prefixes of {s['prefix_chars']} characters (one token each with the tiny "
        f"tokenizer; the 12 together need more KV cache than one server has, less than two), {s['per_prefix']} "
        f"questions each, {s['prefixes'] * s['per_prefix']} requests in one seeded shuffled order, "
        f"{s['concurrency']} clients in a closed loop, streamed, {s['prefix_max_tokens']} output tokens. The same "
        "workload per routing, each with prefixes of its own (a leading tag), so no run finds another's blocks. "
        "random = kube-proxy in iptables mode (a random endpoint per connection), round-robin = IPVS's default. "
        "Hit rate = Δ`vllm:prefix_cache_hits_total` / Δ`vllm:prefix_cache_queries_total` over both servers.", "",
        *_table_a(a), "",
        f"picker / random: hit rate {_ratio(a['picker']['hit_rate'], a['random']['hit_rate'])}x, TTFT p50 "
        f"{_ratio(a['picker'].get('ttft_p50_s'), a['random'].get('ttft_p50_s'))}x, p99 "
        f"{_ratio(a['picker'].get('ttft_p99_s'), a['random'].get('ttft_p99_s'))}x. The picker's TTFT includes its "
        "own ext-proc round trip (through a Python gRPC client and a TLS bridge); the others go straight to the "
        "server.", "",
        "## B. A flood of long requests: short requests' TTFT with and without priority", "",
        f"Workload: {s['flood_concurrency']} clients keep long requests in flight through the picker (prompts of "
        f"{s['long_chars']} characters, unique, {s['long_max_tokens']} output tokens, not streamed); after "
        f"{s['flood_warmup_s']} s, {s['short_count']} short streamed requests ({s['short_max_tokens']} tokens) at "
        f"{s['short_rate']}/s (open loop); {s['flood_repeats']} runs of each, alternating. Without: no class (all "
        "priority 0, first come first served). With: "
        "short `x-gateway-inference-objective: qwen-tiny-interactive` (objective priority 10) and body priority "
        "-10, long `qwen-tiny-batch` (0) and 0 (the objectives' `qwenfleet.io/vllm-priority`).", "",
        *_table_b(b), "",
        f"Pooled over the runs, with / without: short TTFT p50 {_short_ratio(b, 'p50')}x, p99 "
        f"{_short_ratio(b, 'p99')}x.", "",
        "## C. A replica killed mid-run, under two gateway retry policies", "",
        f"Workload: {s['kill_rate']} requests a second through the picker (open loop), {s['kill_max_tokens']} "
        f"output tokens, not streamed; after {s['kill_after_s']} s the process group of `{c0['victim']}` (API "
        "server and engine core) is SIGKILLed. The bench does the kubelet's part (KWOK does none): a pod whose "
        "server process exited is marked NotReady at the next 1-s relist, a running one that fails the rendered "
        f"readiness probe ({c0['readiness_probe']}) when the kubelet would. Each run goes on "
        f"{s['after_drop_s']} s after the picker dropped the pod. The same workload and victim twice, one run per "
        "retry policy of the gateway's half (tests/support/extproc.py, modelling Envoy's `override_host` load "
        "balancing: the picker's endpoints in its order, best first, each tried at most once); in between, the "
        f"killed server was started again on its address ({_restarts(c)}), its pod marked Ready, and the picker "
        "took it back.", "",
        "- **C1, `retry_on: connect-failure`**: the next endpoint only when a connection fails (nothing sent); a "
        "request once sent is never sent again.",
        "- **C2, `retry_on: connect-failure,reset`**: also when the connection that took the request is reset or "
        "closed before any byte of the response came back; the request, whose answer never began, is sent to "
        "the next endpoint. Never once a response byte came back (a started stream that breaks is a failure).", "",
        "In flight on the victim = sent to it before the kill, that attempt not over by then. Served by a fallback "
        "= went on from an endpoint to the next one named (refused at connect, or reset with no response byte) "
        "and was served there: what a gateway that does not go down the list (upstream's reference Envoy: "
        "ORIGINAL_DST, no retry) would have failed. Sent while dying = sent to the victim between the SIGKILL and "
        "its socket's first refused connection (until then the kernel still accepts connections to a killed "
        "server's socket; a request sent on one is reset when its processes are gone).", "",
        "| run | retry_on | requests | failed | in flight on the victim at the kill: failed / served by a fallback "
        "| **failed beyond those in flight** | retried: connect-failure / reset-before-response | served by a "
        "fallback | picked the victim first after the kill | sent to the victim while dying (kill → refusing s) "
        "| kill → NotReady s | kill → dropped s | victim named after the drop (of requests) | errors by kind |",
        "|" + " --- |" * 14,
        *(_row_c(run) for run in c["runs"]), "",
        f"Requests by how many endpoints the picker named: {_per_run(c, 'endpoints_named')}. Failed beyond in "
        f"flight counted from the socket's close instead of the SIGKILL: "
        f"{_per_run(c, 'failed_beyond_in_flight_at_exit')}; the processes' last thread exited after (s): "
        f"{_per_run(c, 'seconds_kill_to_exited')}. Retries on the victim itself (connect-failure / "
        f"reset-before-response): {_per_run(c, 'retried_on_victim_by_reason')}.", "",
        "![routing](routing.png)", ""]
    return "\n".join(lines)


def plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a, b, c = r["phase_a"], r["phase_b"], r["phase_c"]
    fig, axes = plt.subplots(2, 2, figsize=(15, 9.5))
    (ax_a, ax_b), axes_c = axes[0], list(axes[1])
    modes = list(a)
    x = range(len(modes))
    ax_a.bar([i - 0.2 for i in x], [a[m]["hit_rate"] or 0 for m in modes], 0.4, label="prefix-cache hit rate")
    ax_a.set_xticks(list(x), modes)
    ax_a.set_ylabel("hit rate")
    twin = ax_a.twinx()
    twin.plot(list(x), [a[m].get("ttft_p50_s", 0) * 1000 for m in modes], "o-", color="tab:orange", label="TTFT p50")
    twin.plot(list(x), [a[m].get("ttft_p99_s", 0) * 1000 for m in modes], "s--", color="tab:red", label="TTFT p99")
    twin.set_ylabel("TTFT ms")
    twin.set_ylim(0, 1.4 * max([a[m].get("ttft_p99_s", 0) * 1000 for m in modes] + [1]))
    ax_a.set_ylim(0, 1.25)
    ax_a.set_title("A. shared prefixes")
    ax_a.legend(loc="upper left", fontsize=8)
    twin.legend(loc="upper right", fontsize=8)
    keys = list(b["pooled"])
    for offset, q, color in ((-0.2, "p50", "tab:blue"), (0.2, "p99", "tab:orange")):
        ax_b.bar([i + offset for i in range(len(keys))],
                 [b["pooled"][k]["short"].get(f"ttft_{q}_s", 0) * 1000 for k in keys], 0.4, color=color,
                 label=f"short TTFT {q}, pooled")
        for i, k in enumerate(keys):
            runs = [m["short"].get(f"ttft_{q}_s", 0) * 1000 for m in b["runs"] if m["classes"] == k]
            ax_b.scatter([i + offset] * len(runs), runs, color="black", s=10, zorder=3,
                         label="one run" if (i, q) == (0, "p50") else None)
    ax_b.set_xticks(range(len(keys)), [f"{k} priority" for k in keys])
    ax_b.set_yscale("log")
    ax_b.set_ylabel("ms (log)")
    ax_b.set_title("B. short requests under a long-request flood")
    ax_b.legend(fontsize=8)
    for ax, kill in zip(axes_c, c["runs"], strict=False):
        _plot_kill(ax, kill)
    fig.suptitle(f"Routing through the real endpoint picker (EPP {r['epp']}) vs a plain Service: two vLLM CPU "
                 f"servers, tiny Qwen2, {r['cpus']} CPUs, {r['when']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_kill(ax: Any, c: dict[str, Any]) -> None:
    """One kill run: each request at its start (s from the kill), on the row of the endpoint that served it or
    failed, failures marked, requests served by a fallback marked by why they went on."""
    for endpoint, color, row in ((c["victim"], "tab:red", 1), (c["survivor"], "tab:blue", 0)):
        points = [p for p in c["timeline"] if p["endpoint"] == endpoint]
        ax.scatter([p["t"] for p in points if p["ok"]], [row] * sum(p["ok"] for p in points), s=8, color=color,
                   label=f"{'victim' if row else 'survivor'} ok")
        ax.scatter([p["t"] for p in points if not p["ok"]], [row + 0.15] * sum(not p["ok"] for p in points),
                   s=14, marker="x", color="black", label="failed" if row else None)
    for reason, marker, color, y in (("connect-failure", "^", "tab:green", 0.15),
                                     ("reset-before-response", "v", "tab:purple", 0.3)):
        fell_back = [p for p in c["timeline"] if p["ok"] and reason in p.get("retried", [])]
        ax.scatter([p["t"] for p in fell_back], [y] * len(fell_back), s=14, marker=marker, color=color,
                   label=f"served by a fallback ({reason})")
    ax.axvline(0, color="black", lw=1)
    for key, label, y in (("seconds_kill_to_not_ready", "NotReady", 1.35), ("seconds_kill_to_dropped", "dropped",
                                                                               1.25)):
        if c[key] is not None:
            ax.axvline(c[key], color="grey", ls="--", lw=1)
            ax.text(c[key], y, label, fontsize=8)
    ax.text(0, 1.45, "kill", fontsize=8)
    ax.set_yticks([0, 1], ["survivor", "victim"])
    ax.set_ylim(-0.5, 1.6)
    ax.set_xlabel("request start, s from the kill")
    ax.set_title(f"{c['name']}. a replica killed mid-run, retry_on: {c['retry_on']} "
                 f"({c['failed_beyond_in_flight']} failed beyond {c['in_flight_on_victim_at_kill']} in flight)",
                 fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
