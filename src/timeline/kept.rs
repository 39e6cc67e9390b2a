//! Which wire events a scenario keeps: its first ones and its last ones.
//!
//! Why it exists: a scenario's recording is bounded (a soak publishes tens of thousands of
//! messages). Keeping only the first ones lost exactly what a chart is for when the probe seeded a
//! backlog first (issue 64: `forward_path:67`, `migration:61` showed no gateway message at all):
//! the failure comes at the end. So the first [`HEAD`] events are kept (how the scenario began)
//! and, after them, the last [`TAIL`] (what led to its end); those in between are counted.

use std::collections::VecDeque;

/// Events kept from the scenario's start.
pub const HEAD: usize = 2_000;
/// Events kept from its end.
pub const TAIL: usize = 18_000;

/// The events kept so far, and how many were let go between the head and the tail.
#[derive(Debug)]
pub struct Kept<T> {
    head: Vec<T>,
    tail: VecDeque<T>,
    head_cap: usize,
    tail_cap: usize,
    dropped: usize,
}

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Kept::with_caps(HEAD, TAIL)
    }
}

impl<T> Kept<T> {
    /// Keeps the first `head` and the last `tail` events.
    pub fn with_caps(head: usize, tail: usize) -> Self {
        Kept {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap: head,
            tail_cap: tail,
            dropped: 0,
        }
    }

    pub fn push(&mut self, event: T) {
        if self.head.len() < self.head_cap {
            self.head.push(event);
            return;
        }
        self.tail.push_back(event);
        if self.tail.len() > self.tail_cap {
            self.tail.pop_front();
            self.dropped += 1;
        }
    }

    /// How many events between the head and the tail were let go.
    pub fn dropped(&self) -> usize {
        self.dropped
    }

    /// Every event kept, in the order pushed.
    pub fn to_vec(&self) -> Vec<T>
    where
        T: Clone,
    {
        self.head.iter().chain(self.tail.iter()).cloned().collect()
    }

    /// The note a chart shows when some were let go.
    pub fn note(&self) -> Option<String> {
        (self.dropped > 0).then(|| {
            format!(
                "{} message(s) between the first {} and the last {} recorded were not kept",
                self.dropped, self.head_cap, self.tail_cap
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_and_the_last_are_kept_and_the_middle_counted() {
        let mut k = Kept::with_caps(3, 4);
        for i in 0..20 {
            k.push(i);
        }
        assert_eq!(k.to_vec(), vec![0, 1, 2, 16, 17, 18, 19]);
        assert_eq!(k.dropped(), 13);
        assert!(k.note().is_some_and(|n| n.starts_with("13 message(s)")));
        let mut few = Kept::with_caps(3, 4);
        for i in 0..5 {
            few.push(i);
        }
        assert_eq!((few.to_vec(), few.note()), (vec![0, 1, 2, 3, 4], None));
    }
}
