//! Prometheus metrics: the supervisor's counters, gauges and histograms encoded in the
//! Prometheus text format (`prometheus-client`) at scrape time. Nothing here sits on a data
//! path: the actors keep plain atomics ([`RuntimeStats`](crate::stats::RuntimeStats), the
//! ledger writer's stats, [`Histo`]), and a scrape reads them.
//!
//! Labels are typed (`EncodeLabelSet` structs); none carries a session id or anything
//! derived from one.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::actor::Supervisor;
use crate::stats::histogram::Histo;

/// Reads the supervisor at every scrape.
#[derive(Debug)]
struct SupervisorCollector(Arc<Supervisor>);

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GenerationLabel {
    generation: u32,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabel {
    mode: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabel {
    cause: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabel {
    channel: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

fn gauge(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    v: i64,
) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

fn gauge_f(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    v: f64,
) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

fn counter(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    v: u64,
) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauges<L: EncodeLabelSet>(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[(L, i64)],
) -> Result<(), std::fmt::Error> {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn counters<L: EncodeLabelSet>(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[(L, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn histogram(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    h: &Histo,
) -> Result<(), std::fmt::Error> {
    let (sum, count, buckets) = h.snapshot();
    let mut m = e.encode_descriptor(name, help, None, MetricType::Histogram)?;
    m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, count, &buckets, None)
}

impl Collector for SupervisorCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let sup = &self.0;
        let st = sup.stats();
        let gens = sup.generations().status();
        let phase = sup.phase();
        let phases = [
            ("starting", crate::actor::Phase::Starting),
            ("serving", crate::actor::Phase::Serving),
            ("draining", crate::actor::Phase::Draining),
            ("stopped", crate::actor::Phase::Stopped),
        ];
        let rows: Vec<(PhaseLabel, i64)> =
            phases.iter().map(|(n, p)| (PhaseLabel { phase: n }, i64::from(*p == phase))).collect();
        gauges(&mut e, "mcp_phase", "Lifecycle phase (1 for the current one)", &rows)?;
        gauge(
            &mut e,
            "mcp_generation_current",
            "The current generation",
            i64::from(sup.generations().current().settings.id.0),
        )?;
        let by_gen = |f: fn(&crate::actor::GenStatus) -> i64| {
            gens.iter()
                .map(|g| (GenerationLabel { generation: g.settings.id.0 }, f(g)))
                .collect::<Vec<_>>()
        };
        gauges(
            &mut e,
            "mcp_sessions_live",
            "Live sessions by the generation they were opened under",
            &by_gen(|g| g.sessions),
        )?;
        gauges(
            &mut e,
            "mcp_streams_live",
            "Live streams by the generation they were opened under",
            &by_gen(|g| g.streams),
        )?;
        gauges(
            &mut e,
            "mcp_requests_in_flight",
            "Requests in flight by the generation they were admitted under",
            &by_gen(|g| g.in_flight),
        )?;
        gauge(
            &mut e,
            "mcp_sessions_hibernating",
            "Live sessions kept as data while they have nothing to do (no actor; woken by their next request)",
            sup.sessions_hibernating() as i64,
        )?;
        let (hibernated, woken) = sup.sessions_hibernated_and_woken();
        counter(
            &mut e,
            "mcp_sessions_hibernated",
            "Sessions kept as data: new ones from their handshake on, idle ones once they hibernate (each woken again, ended or parked by its deadline, or recorded as data by a stop)",
            hibernated,
        )?;
        counter(
            &mut e,
            "mcp_sessions_woken",
            "Hibernating sessions woken (by a request, a lookup or their expiry or park time)",
            woken,
        )?;
        let m = st.metrics();
        counter(
            &mut e,
            "mcp_sessions_parked",
            "Sessions parked (their state left in the ledger only)",
            m.sessions_parked,
        )?;
        counter(
            &mut e,
            "mcp_sessions_revived",
            "Sessions rebuilt from the ledger",
            m.sessions_revived,
        )?;
        counter(
            &mut e,
            "mcp_sessions_evicted_from_ledger",
            "Recorded sessions evicted because the ledger was full",
            m.sessions_evicted_from_ledger,
        )?;
        let modes: Vec<(ModeLabel, i64)> =
            m.streams_by_mode.iter().map(|(n, v)| (ModeLabel { mode: n }, *v)).collect();
        gauges(&mut e, "mcp_streams_by_mode", "Live streams by how they are served", &modes)?;
        let states: Vec<(StateLabel, i64)> =
            m.streams_by_state.iter().map(|(n, v)| (StateLabel { state: n }, *v)).collect();
        gauges(
            &mut e,
            "mcp_streams_by_state",
            "Live streams by state (open: a connection attached)",
            &states,
        )?;
        gauge(
            &mut e,
            "mcp_streams_dormant",
            "Closed streams kept for late resumes as data, without an actor (answered in their first write, not resumed since)",
            st.streams_dormant(),
        )?;
        gauge(
            &mut e,
            "mcp_replay_window_bytes",
            "Bytes charged to the stream memory budget (replay windows, retained streams, kept handshakes)",
            sup.stream_memory_bytes() as i64,
        )?;
        gauge(
            &mut e,
            "mcp_request_memory_bytes",
            "Bytes of parsed requests held in flight, charged to the request memory budget (limits.request_memory_bytes)",
            st.request_memory_bytes() as i64,
        )?;
        gauge(&mut e, "mcp_connections", "Open TCP connections", m.connections)?;
        counter(
            &mut e,
            "mcp_connections_accepted",
            "TCP connections accepted (against the requests' count: clients that do not keep theirs)",
            m.connections_accepted,
        )?;
        counter(&mut e, "mcp_events", "Events appended to streams", m.events)?;
        counter(&mut e, "mcp_resumes_served", "Resumes that replayed from a window", m.resumes)?;
        counter(
            &mut e,
            "mcp_resume_gaps",
            "Resumes that found the events after their cursor lost",
            m.gaps,
        )?;
        counter(
            &mut e,
            "mcp_slow_readers_detached",
            "Connections detached because their reader fell behind",
            m.slow_readers,
        )?;
        counter(
            &mut e,
            "mcp_events_lost_unattached",
            "Events of plain (not resumable) streams produced with no connection attached",
            m.lost_unattached,
        )?;
        counter(
            &mut e,
            "mcp_idempotency_replays",
            "Write-tool calls answered from their receipt (not run again)",
            m.receipt_replays,
        )?;
        counter(
            &mut e,
            "mcp_idempotency_attached",
            "Retries of a running write-tool call attached to its one execution",
            m.receipt_attaches,
        )?;
        let (modern_running, modern_served, modern_cancelled) = st.modern();
        gauge(&mut e, "mcp_modern_in_flight", "2026-07-28 requests running", modern_running)?;
        counter(
            &mut e,
            "mcp_modern_served",
            "2026-07-28 requests answered (a result or a JSON-RPC error after admission)",
            modern_served,
        )?;
        counter(
            &mut e,
            "mcp_modern_cancelled",
            "2026-07-28 requests cancelled by their client closing the response stream",
            modern_cancelled,
        )?;
        let (listen_open, listen_opened, listen_completed) = st.listen();
        gauge(&mut e, "mcp_listen_streams", "Open subscriptions/listen streams", listen_open)?;
        counter(&mut e, "mcp_listen_opened", "subscriptions/listen streams opened", listen_opened)?;
        counter(
            &mut e,
            "mcp_listen_completed",
            "subscriptions/listen streams the server ended with their completion result (drain, stop)",
            listen_completed,
        )?;
        let refused: Vec<(CauseLabel, u64)> = crate::proto::error::Rejection::CAUSES
            .iter()
            .map(|c| (CauseLabel { cause: c }, st.refusals(c)))
            .collect();
        counters(&mut e, "mcp_refusals", "Requests refused, by cause", &refused)?;
        let missed: Vec<(ChannelLabel, u64)> = st
            .bus_missed_counts()
            .iter()
            .map(|&(c, v)| (ChannelLabel { channel: c.name() }, v))
            .collect();
        counters(
            &mut e,
            "mcp_bus_missed",
            "Subscriptions to the other hosts' bus (shared ledger) taken, first or again after a cut, by channel: what was published before is looked up",
            &missed,
        )?;
        counter(
            &mut e,
            "mcp_bus_answers_recovered",
            "Answers to server-to-client requests read from the ledger after a subscription cut (their publication was missed)",
            st.answers_recovered(),
        )?;
        counter(
            &mut e,
            "mcp_bus_relays_dropped",
            "Messages relayed from another host (answers, cancellations, log levels) dropped at their session's full inbox",
            st.relays_dropped(),
        )?;
        let statuses: Vec<(StatusLabel, u64)> =
            m.http_responses.iter().map(|(s, v)| (StatusLabel { status: s }, *v)).collect();
        counters(
            &mut e,
            "mcp_http_responses",
            "HTTP responses of the MCP endpoint by status",
            &statuses,
        )?;
        counter(
            &mut e,
            "mcp_shadow_streams_verified",
            "Shadow streams whose ledger copy was read back and compared",
            m.shadow_verified,
        )?;
        counter(
            &mut e,
            "mcp_shadow_events",
            "Events sent on shadow streams that were verified",
            m.shadow_events,
        )?;
        let kinds: Vec<(KindLabel, u64)> =
            m.shadow_mismatches.iter().map(|(k, v)| (KindLabel { kind: k }, *v)).collect();
        counters(
            &mut e,
            "mcp_shadow_mismatches",
            "Shadow ledger events that did not match what was sent, by kind",
            &kinds,
        )?;
        counter(
            &mut e,
            "mcp_shadow_window_lost",
            "Shadow events older than the window bound (a resume from the start would have lost them)",
            m.shadow_window_lost,
        )?;
        counter(
            &mut e,
            "mcp_shadow_unreadable",
            "Shadow streams whose ledger copy could not be read",
            m.shadow_unreadable,
        )?;
        counter(
            &mut e,
            "mcp_shadow_unverified",
            "Shadow streams that ended with their session (DELETE, expiry, parking, shutdown) and were not verified",
            m.shadow_unverified,
        )?;
        histogram(
            &mut e,
            "mcp_shadow_commit_seconds",
            "From a shadow stream's close to the commit of all its ledger writes",
            st.shadow_latency(),
        )?;
        let w = sup.ledger_writer();
        let ws = w.snapshot();
        gauge(
            &mut e,
            "mcp_ledger_queue_bytes",
            "Bytes waiting for the ledger writer",
            ws.queued_bytes as i64,
        )?;
        counter(&mut e, "mcp_ledger_batches", "Ledger transactions committed", ws.batches)?;
        counter(&mut e, "mcp_ledger_ops", "Ledger operations committed", ws.ops)?;
        counter(
            &mut e,
            "mcp_ledger_events_dropped",
            "Event appends refused by the ledger's overflow policy",
            ws.events_dropped,
        )?;
        counter(
            &mut e,
            "mcp_ledger_errors",
            "Ledger commit attempts the store refused (each is retried)",
            ws.errors,
        )?;
        counter(
            &mut e,
            "mcp_ledger_lost_ops",
            "Ledger operations given up on as the process stopped with a store that could not commit",
            ws.lost_ops,
        )?;
        gauge(
            &mut e,
            "mcp_ledger_failing",
            "1 while the ledger cannot commit (retrying; new durable work is refused)",
            i64::from(ws.state == crate::ledger::LedgerState::Failing),
        )?;
        gauge(
            &mut e,
            "mcp_ledger_backlog",
            "1 while more than ledger.queue_max_bytes wait for the writer (new durable work is refused)",
            i64::from(ws.state == crate::ledger::LedgerState::Backlog),
        )?;
        let now_ms = sup.now().0;
        let since = |t: Option<u64>| t.map_or(0, |t| now_ms.saturating_sub(t)) as f64 / 1000.0;
        if let Some(log) = ws.log {
            gauge(
                &mut e,
                "mcp_ledger_log_pages",
                "Pages (4 KiB) in the SQLite write-ahead log since it last restarted; past ledger.checkpoint_pages a checkpoint copies them, past four times that the writer does",
                i64::try_from(log.pages).unwrap_or(i64::MAX),
            )?;
            counter(
                &mut e,
                "mcp_ledger_checkpoint_failures",
                "SQLite checkpoints that failed (the log grows until one succeeds)",
                log.checkpoint_failures,
            )?;
        }
        gauge_f(
            &mut e,
            "mcp_ledger_seconds_since_commit",
            "Seconds since the ledger last committed a batch (0 before the first)",
            since(ws.last_commit_ms),
        )?;
        gauge_f(
            &mut e,
            "mcp_ledger_failing_seconds",
            "Seconds the ledger has been unable to commit (0 while it commits)",
            since(ws.failing_since_ms),
        )?;
        if let Some(n) = w.store().round_trips() {
            counter(
                &mut e,
                "mcp_ledger_round_trips",
                "Round trips to the ledger's server (Redis: each batch, read, count or sweep; not the lease's renewals, the subscriptions or the followers' wait)",
                n,
            )?;
        }
        if let Some(us) = w.store().round_trip_us() {
            gauge_f(
                &mut e,
                "mcp_ledger_round_trip_seconds",
                "The last round trip to the ledger's server (Redis: the lease's last renewal, every third of the lease)",
                us as f64 / 1e6,
            )?;
        }
        let (commit, batch) = w.histograms();
        histogram(&mut e, "mcp_ledger_commit_seconds", "Time to commit one ledger batch", commit)?;
        histogram(&mut e, "mcp_ledger_batch_ops", "Operations per committed ledger batch", batch)?;
        let reads = sup.ledger_reads();
        histogram(
            &mut e,
            "mcp_ledger_read_seconds",
            "Time the store took for one ledger read (on Redis: its round trips)",
            reads.histogram(),
        )?;
        let rs = reads.snapshot();
        counter(&mut e, "mcp_ledger_read_errors", "Ledger reads the store failed", rs.errors)?;
        counter(
            &mut e,
            "mcp_ledger_reads_refused",
            "Ledger reads refused because 1,024 waited already (503)",
            rs.refused,
        )?;
        Ok(())
    }
}

/// The metrics of `sup`, ready to encode.
#[must_use]
pub(super) fn registry(sup: Arc<Supervisor>) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(SupervisorCollector(sup)));
    r
}

/// Encode in the Prometheus text format (version 0.0.4).
#[must_use]
pub(super) fn encode(r: &Registry) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; an encoder error leaves what was written.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, r);
    out
}

/// The content type of [`encode`]'s output.
pub(super) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histograms_exposition_counts_each_observation_once_in_cumulative_buckets() {
        #[derive(Debug)]
        struct One(Histo);
        impl Collector for One {
            fn encode(&self, mut e: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
                histogram(&mut e, "t_seconds", "test", &self.0)
            }
        }
        let h = Histo::new(&[1.0, 2.0]);
        for v in [0.5, 1.5, 1.5, 9.0] {
            h.observe(v);
        }
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(One(h)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let sample = |series: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
                .unwrap_or_else(|| panic!("{series} in {text}"))
                .to_owned()
        };
        // Cumulative once: 1 at or under 1, 3 at or under 2, all 4 under +Inf, as _count.
        assert_eq!(sample("t_seconds_bucket{le=\"1.0\"}"), "1", "{text}");
        assert_eq!(sample("t_seconds_bucket{le=\"2.0\"}"), "3", "{text}");
        assert_eq!(sample("t_seconds_bucket{le=\"+Inf\"}"), "4", "{text}");
        assert_eq!(sample("t_seconds_count"), "4", "{text}");
        assert_eq!(sample("t_seconds_sum").parse::<f64>().unwrap(), 12.5, "{text}");
    }
}
