//! Spans grouped per rank call: which device calls ran inside each collective call, and the time
//! the rank spent waiting in the rendezvous (inside the call, outside its own device calls).

use super::tracer::{Span, SpanKind};
use std::time::Duration;

/// One rank's collective call of one generation and the device calls its thread made inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallTimeline {
    /// The rank.
    pub rank: usize,
    /// The generation.
    pub generation: u64,
    /// When the call began.
    pub start: Duration,
    /// When it returned.
    pub end: Duration,
    /// Whether it returned `Ok`.
    pub ok: bool,
    /// The device calls inside it, in order: `prepare`, and on the rank that ran the plan (the
    /// last to arrive), `begin`, every `exchange` and `finish`.
    pub device_calls: Vec<Span>,
}

impl CallTimeline {
    /// Whether this rank ran the generation's plan (its thread called `begin`).
    pub fn ran_plan(&self) -> bool {
        self.device_calls
            .iter()
            .any(|span| matches!(span.kind, SpanKind::Begin { .. }))
    }

    /// [`ran_plan`](Self::ran_plan), under its name from when every plan was a ring.
    pub fn ran_ring(&self) -> bool {
        self.ran_plan()
    }

    /// The intervals of the call not spent in the rank's own device calls: waiting for the other
    /// ranks (and taking the state lock, publishing, delivering). Empty intervals are left out.
    pub fn waits(&self) -> Vec<(Duration, Duration)> {
        let mut waits = Vec::new();
        let mut at = self.start;
        for span in &self.device_calls {
            if span.start > at {
                waits.push((at, span.start));
            }
            at = at.max(span.end);
        }
        if self.end > at {
            waits.push((at, self.end));
        }
        waits
    }

    /// The plan's interval: from `begin` to the end of the last device call, if this rank ran it.
    pub fn plan(&self) -> Option<(Duration, Duration)> {
        let begin = self
            .device_calls
            .iter()
            .position(|span| matches!(span.kind, SpanKind::Begin { .. }))?;
        let end = self.device_calls[begin..]
            .iter()
            .map(|span| span.end)
            .max()?;
        Some((self.device_calls[begin].start, end))
    }

    /// [`plan`](Self::plan), under its name from when every plan was a ring.
    pub fn ring(&self) -> Option<(Duration, Duration)> {
        self.plan()
    }

    /// Elements moved by the steps that completed (over all links), if this rank ran the plan.
    pub fn moved(&self) -> usize {
        self.device_calls
            .iter()
            .filter(|span| span.ok)
            .map(|span| match span.kind {
                SpanKind::Exchange { elements, .. } => elements,
                _ => 0,
            })
            .sum()
    }
}

/// Group `spans` into rank calls. Device spans that lie inside no call of their rank (or have no
/// rank) are returned apart, in the order given.
pub fn timelines(spans: &[Span]) -> (Vec<CallTimeline>, Vec<Span>) {
    let mut calls: Vec<CallTimeline> = spans
        .iter()
        .filter_map(|span| match (span.kind.clone(), span.rank) {
            (SpanKind::Call { generation }, Some(rank)) => Some(CallTimeline {
                rank,
                generation,
                start: span.start,
                end: span.end,
                ok: span.ok,
                device_calls: Vec::new(),
            }),
            _ => None,
        })
        .collect();
    calls.sort_by_key(|call| (call.rank, call.start));
    let mut device: Vec<&Span> = spans
        .iter()
        .filter(|span| span.kind.is_device_call())
        .collect();
    device.sort_by_key(|span| span.start);
    let mut loose = Vec::new();
    for span in device {
        let owner = span.rank.and_then(|rank| {
            // The last call of this rank that started no later than the span.
            let after = calls.partition_point(|call| (call.rank, call.start) <= (rank, span.start));
            after
                .checked_sub(1)
                .filter(|&index| calls[index].rank == rank && span.end <= calls[index].end)
        });
        match owner {
            Some(index) => calls[index].device_calls.push(span.clone()),
            None => loose.push(span.clone()),
        }
    }
    (calls, loose)
}

#[cfg(test)]
mod tests {
    use super::{Span, SpanKind, timelines};
    use std::time::Duration;

    fn span(rank: usize, kind: SpanKind, start: u64, end: u64) -> Span {
        Span {
            rank: Some(rank),
            kind,
            start: Duration::from_micros(start),
            end: Duration::from_micros(end),
            ok: true,
        }
    }

    #[test]
    fn waits_are_the_gaps_between_a_calls_device_calls() {
        let call = |rank, start, end| span(rank, SpanKind::Call { generation: 0 }, start, end);
        let spans = vec![
            call(0, 0, 100),
            call(1, 10, 100),
            span(0, SpanKind::Prepare, 1, 3),
            span(1, SpanKind::Prepare, 11, 12),
            span(
                1,
                SpanKind::Begin {
                    world: 2,
                    elements: 4,
                },
                20,
                25,
            ),
            span(
                1,
                SpanKind::Exchange {
                    step: 0,
                    combine: true,
                    elements: 4,
                    busiest: 2,
                },
                25,
                30,
            ),
            span(1, SpanKind::Finish, 30, 40),
            span(1, SpanKind::Prepare, 200, 201),
        ];
        let (calls, loose) = timelines(&spans);
        assert_eq!(calls.len(), 2);
        assert_eq!(loose.len(), 1);
        let micros = |waits: Vec<(Duration, Duration)>| -> Vec<(u128, u128)> {
            waits
                .into_iter()
                .map(|(a, b)| (a.as_micros(), b.as_micros()))
                .collect()
        };
        assert!(!calls[0].ran_plan());
        assert_eq!(micros(calls[0].waits()), vec![(0, 1), (3, 100)]);
        assert!(calls[1].ran_plan());
        assert_eq!(
            micros(calls[1].waits()),
            vec![(10, 11), (12, 20), (40, 100)]
        );
        assert_eq!(calls[1].moved(), 4);
        assert_eq!(
            calls[1].plan(),
            Some((Duration::from_micros(20), Duration::from_micros(40)))
        );
    }
}
