//! Vector clocks: one counter per agent (a stream or a host thread).

/// What an agent knows of every agent's progress: entry `a` is the last tick of agent `a`
/// ordered before the agent's present point. Missing entries are 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VectorClock(Vec<u32>);

impl VectorClock {
    /// The tick of `agent` this clock has seen.
    pub fn get(&self, agent: usize) -> u32 {
        self.0.get(agent).copied().unwrap_or(0)
    }

    /// Advances `agent`'s own entry and returns the new tick.
    pub fn tick(&mut self, agent: usize) -> u32 {
        if self.0.len() <= agent {
            self.0.resize(agent + 1, 0);
        }
        self.0[agent] += 1;
        self.0[agent]
    }

    /// Takes in everything `other` has seen (the pointwise maximum).
    pub fn join(&mut self, other: &VectorClock) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (mine, theirs) in self.0.iter_mut().zip(&other.0) {
            *mine = (*mine).max(*theirs);
        }
    }

    /// Whether the event `(agent, tick)` happened before the point this clock stands for.
    pub fn has_seen(&self, agent: usize, tick: u32) -> bool {
        tick <= self.get(agent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_is_the_pointwise_maximum_and_ticks_are_seen_after_a_join() {
        let (mut a, mut b) = (VectorClock::default(), VectorClock::default());
        let t = a.tick(0);
        b.tick(2);
        assert!(!b.has_seen(0, t));
        b.join(&a);
        assert!(b.has_seen(0, t));
        assert_eq!((b.get(0), b.get(1), b.get(2)), (1, 0, 1));
    }
}
