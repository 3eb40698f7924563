//! A one-line progress bar on stderr, drawn only when stderr is a terminal, so scripts and
//! pipes see clean output. Public for the comparison benchmark (`tidelog-bench`), which
//! draws the same bar.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Redraws at most this often: a bar must not cost the work it reports on.
const REDRAW_EVERY: Duration = Duration::from_millis(100);
const BAR_WIDTH: u64 = 30;

/// The bar; [`Progress::finish`] (or dropping it) clears its line.
#[derive(Debug)]
pub struct Progress {
    enabled: bool,
    what: &'static str,
    total: Option<u64>,
    done: u64,
    message: String,
    started: Instant,
    drawn: Option<Instant>,
}

impl Progress {
    /// A bar counting `what` up to `total` (or, without one, a running count).
    pub fn new(what: &'static str, total: Option<u64>) -> Progress {
        Progress {
            enabled: std::io::stderr().is_terminal(),
            what,
            total,
            done: 0,
            message: String::new(),
            started: Instant::now(),
            drawn: None,
        }
    }

    /// Counts `n` more done.
    pub fn inc(&mut self, n: u64) {
        self.done += n;
        self.draw(false);
    }

    /// Shows `message` after the count (what is being done now).
    pub fn message(&mut self, message: impl Into<String>) {
        self.message = message.into();
        self.draw(true);
    }

    fn draw(&mut self, force: bool) {
        if !self.enabled || (!force && self.drawn.is_some_and(|t| t.elapsed() < REDRAW_EVERY)) {
            return;
        }
        self.drawn = Some(Instant::now());
        let secs = self.started.elapsed().as_secs();
        let line = match self.total {
            Some(total) => {
                let filled = (self.done.min(total) * BAR_WIDTH)
                    .checked_div(total)
                    .unwrap_or(0);
                format!(
                    "[{}{}] {}/{total} {} {:>3}s {}",
                    "#".repeat(filled as usize),
                    "-".repeat((BAR_WIDTH - filled) as usize),
                    self.done,
                    self.what,
                    secs,
                    self.message
                )
            }
            None => format!("{} {} {:>3}s {}", self.done, self.what, secs, self.message),
        };
        // \r and clear-to-end-of-line: redraw in place.
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{}\x1b[K", truncate(&line, 120));
        let _ = err.flush();
    }

    /// Clears the bar's line.
    pub fn finish(&mut self) {
        if self.enabled && self.drawn.is_some() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
        self.drawn = None;
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

fn truncate(s: &str, chars: usize) -> &str {
    s.char_indices().nth(chars).map_or(s, |(i, _)| &s[..i])
}
