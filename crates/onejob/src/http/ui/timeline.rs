//! The job page's timeline: one horizontal bar per attempt, from its start to its end (or to
//! now while it is live), laid out here in SVG coordinates so that the template only draws.
//! Each bar is labelled with its number, provider and outcome; the winner carries a ★, and
//! the state, winner and hedge are CSS classes (discarded hatched grey, unknown dashed amber).

use time::OffsetDateTime;
use uuid::Uuid;

use super::display;
use crate::store::AttemptRecord;

/// The drawing's width in SVG units.
pub const WIDTH: u32 = 960;
const MARGIN: u32 = 8;
const AXIS: u32 = 24;
const ROW: u32 = 46;
const BAR_HEIGHT: u32 = 18;
const MIN_BAR: u32 = 3;

/// A job's attempts laid out on one time axis.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// The drawing's width.
    pub width: u32,
    /// The drawing's height.
    pub height: u32,
    /// One bar per attempt, oldest first.
    pub bars: Vec<Bar>,
    /// Time marks along the top.
    pub ticks: Vec<Tick>,
}

/// One attempt's bar.
#[derive(Debug, Clone)]
pub struct Bar {
    /// The attempt id.
    pub id: Uuid,
    /// Its state's name.
    pub state: &'static str,
    /// Whether its result is the job's.
    pub winner: bool,
    /// Whether it was a hedge.
    pub hedge: bool,
    /// Left edge.
    pub x: u32,
    /// Top edge.
    pub y: u32,
    /// Length (at least a few units, so an instant attempt shows).
    pub width: u32,
    /// Thickness.
    pub height: u32,
    /// Baseline of the label above the bar.
    pub label_y: u32,
    /// `★ #2 fake-backup · succeeded · hedge · 53ms`.
    pub label: String,
    /// The tooltip: id and times.
    pub title: String,
    /// CSS classes: `bar`, the state, and `winner`, `hedge`, `live` where they apply.
    pub class: String,
}

/// A time mark on the axis.
#[derive(Debug, Clone)]
pub struct Tick {
    /// Where.
    pub x: u32,
    /// Time since the first attempt started: `+1.25s`.
    pub label: String,
    /// SVG `text-anchor`, so the outer labels stay inside the drawing.
    pub anchor: &'static str,
}

impl Timeline {
    /// Lays out `attempts` (oldest first) with `winner` marked, live attempts running to
    /// `now`. `None` when there are no attempts.
    pub fn new(
        attempts: &[AttemptRecord],
        winner: Option<Uuid>,
        now: OffsetDateTime,
    ) -> Option<Timeline> {
        let start = attempts.iter().map(|a| a.started_at).min()?;
        let end_of = |a: &AttemptRecord| a.finished_at.unwrap_or(now).max(a.started_at);
        let end = attempts.iter().map(end_of).max()?;
        let span_ms = (end - start).whole_milliseconds().max(1) as f64;
        let plot = f64::from(WIDTH - 2 * MARGIN);
        let at = |t: OffsetDateTime| {
            let ms = (t - start).whole_milliseconds() as f64;
            MARGIN + (ms / span_ms * plot).round().clamp(0.0, plot) as u32
        };
        let bars = attempts
            .iter()
            .enumerate()
            .map(|(row, a)| {
                let top = AXIS + row as u32 * ROW;
                let right = at(end_of(a));
                let x = at(a.started_at).min(WIDTH - MARGIN - MIN_BAR);
                let width = right.saturating_sub(x).max(MIN_BAR);
                let is_winner = winner == Some(a.id);
                let live = a.finished_at.is_none();
                let mut label = String::new();
                if is_winner {
                    label.push_str("★ ");
                }
                label.push_str(&format!("#{} {} · {}", a.number, a.provider, a.state));
                if is_winner {
                    label.push_str(" (winner)");
                }
                if a.hedge {
                    label.push_str(" · hedge");
                }
                let length = display::duration(end_of(a) - a.started_at);
                if live {
                    label.push_str(&format!(" · {length} so far"));
                } else {
                    label.push_str(&format!(" · {length}"));
                }
                let mut class = format!("bar {}", a.state);
                for (flag, name) in [(is_winner, "winner"), (a.hedge, "hedge"), (live, "live")] {
                    if flag {
                        class.push(' ');
                        class.push_str(name);
                    }
                }
                Bar {
                    id: a.id,
                    state: a.state.as_str(),
                    winner: is_winner,
                    hedge: a.hedge,
                    x,
                    y: top + 20,
                    width,
                    height: BAR_HEIGHT,
                    label_y: top + 14,
                    title: format!(
                        "attempt {} · started {} · ended {}",
                        a.id,
                        display::time(a.started_at),
                        display::maybe_time(a.finished_at)
                    ),
                    label,
                    class,
                }
            })
            .collect::<Vec<_>>();
        let ticks = (0..=4)
            .map(|i| {
                let offset = time::Duration::milliseconds((span_ms * f64::from(i) / 4.0) as i64);
                Tick {
                    x: MARGIN + (plot * f64::from(i) / 4.0).round() as u32,
                    label: format!("+{}", display::duration(offset)),
                    anchor: match i {
                        0 => "start",
                        4 => "end",
                        _ => "middle",
                    },
                }
            })
            .collect();
        Some(Timeline {
            width: WIDTH,
            height: AXIS + bars.len() as u32 * ROW + MARGIN,
            bars,
            ticks,
        })
    }
}

#[cfg(test)]
mod tests {
    use onejob_domain::AttemptState;
    use time::{Duration, macros::datetime};

    use super::*;

    const T0: OffsetDateTime = datetime!(2026-11-30 04:00:00 UTC);

    fn attempt(
        number: i32,
        state: AttemptState,
        hedge: bool,
        from_ms: i64,
        to_ms: Option<i64>,
    ) -> AttemptRecord {
        AttemptRecord {
            id: Uuid::from_u128(number as u128),
            job_id: Uuid::nil(),
            number,
            provider: if hedge { "fake-backup" } else { "fake" }.into(),
            state,
            hedge,
            task_id: None,
            worker: None,
            lease_expires_at: None,
            deadline_at: None,
            started_at: T0 + Duration::milliseconds(from_ms),
            acknowledged_at: None,
            finished_at: to_ms.map(|ms| T0 + Duration::milliseconds(ms)),
            unknown_since: None,
            upstream_key: None,
            key_spent: false,
            error: None,
            reconcile_checks: 0,
        }
    }

    #[test]
    fn a_hedge_race_marks_the_winner_and_the_discarded_loser() {
        let attempts = [
            attempt(1, AttemptState::Discarded, false, 0, Some(1500)),
            attempt(2, AttemptState::Succeeded, true, 200, Some(250)),
        ];
        let timeline = Timeline::new(&attempts, Some(attempts[1].id), T0).unwrap();
        let [loser, winner] = &timeline.bars[..] else {
            panic!("two bars")
        };
        assert!(winner.winner && winner.hedge && !loser.winner);
        assert_eq!(winner.class, "bar succeeded winner hedge");
        assert_eq!(loser.class, "bar discarded");
        assert!(
            winner
                .label
                .starts_with("★ #2 fake-backup · succeeded (winner) · hedge")
        );
        assert!(loser.label.starts_with("#1 fake · discarded"));
        // The loser spans the whole axis; the winner starts at 200/1500 of it.
        assert_eq!(loser.x, MARGIN);
        assert_eq!(loser.x + loser.width, WIDTH - MARGIN);
        assert_eq!(
            winner.x,
            MARGIN + ((200.0 / 1500.0) * 944.0_f64).round() as u32
        );
        assert!(winner.y > loser.y);
    }

    #[test]
    fn a_live_attempt_runs_to_now() {
        let attempts = [attempt(1, AttemptState::Unknown, false, 0, None)];
        let now = T0 + Duration::seconds(3);
        let timeline = Timeline::new(&attempts, None, now).unwrap();
        let bar = &timeline.bars[0];
        assert_eq!(bar.class, "bar unknown live");
        assert_eq!(bar.x + bar.width, WIDTH - MARGIN);
        assert!(bar.label.ends_with("3.00s so far"), "{}", bar.label);
        assert_eq!(timeline.ticks.last().unwrap().label, "+3.00s");
    }

    #[test]
    fn an_instant_attempt_still_shows_and_no_attempts_draw_nothing() {
        let attempts = [attempt(1, AttemptState::Failed, false, 0, Some(0))];
        let timeline = Timeline::new(&attempts, None, T0).unwrap();
        assert!(timeline.bars[0].width >= MIN_BAR);
        assert!(Timeline::new(&[], None, T0).is_none());
    }
}
