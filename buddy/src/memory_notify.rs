//! The memory hotplug notifier chain: `register_memory_notifier`,
//! `memory_notify`.
//!
//! The kernel tells subsystems that keep per-memory state (slab's per-node
//! caches, KASAN's shadow, page_ext, virtio-mem, the page owner...) about
//! every online and offline through one blocking notifier chain
//! (drivers/base/memory.c). `online_pages` sends `MEM_GOING_ONLINE` after
//! `move_pfn_range_to_zone` has spanned the zone over the range and
//! initialised its memmap, and before any page reaches the buddy; a
//! callback that answers `NOTIFY_BAD` (e.g. it could not allocate its own
//! metadata for the new memory) makes the online fail: the kernel sends
//! `MEM_CANCEL_ONLINE` to the whole chain, takes the range out of the zone
//! again (`remove_pfn_range_from_zone`) and returns the error. Only after
//! the pages are freed to the buddy does it send `MEM_ONLINE`, whose
//! answer it ignores. Offline is the mirror image: `MEM_GOING_OFFLINE`
//! may refuse (`MEM_CANCEL_OFFLINE` follows), `MEM_OFFLINE` is told.
//!
//! Callbacks run in priority order, higher first, in registration order
//! among equals (`notifier_chain_register`); the first that refuses stops
//! the walk (`NOTIFY_STOP_MASK`). Left out: the `status_change_nid*`
//! fields of `struct memory_notify` (since 6.17 a separate node notifier
//! chain), and the callbacks' own work.

use sparsemem::{NodeId, Pfn};

/// The events of the chain (`include/linux/memory.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryAction {
    /// `MEM_GOING_ONLINE`: the range is about to be onlined; a callback
    /// may refuse.
    GoingOnline,
    /// `MEM_CANCEL_ONLINE`: a callback refused `MEM_GOING_ONLINE`; undo
    /// what it prepared.
    CancelOnline,
    /// `MEM_ONLINE`: the range's pages are in the buddy.
    Online,
    /// `MEM_GOING_OFFLINE`: the range is about to be offlined; a callback
    /// may refuse.
    GoingOffline,
    /// `MEM_CANCEL_OFFLINE`: a callback refused `MEM_GOING_OFFLINE`.
    CancelOffline,
    /// `MEM_OFFLINE`: the range is offline.
    Offline,
}

/// `struct memory_notify`: the range an event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryNotify {
    /// First pfn of the range.
    pub start_pfn: Pfn,
    /// Pages in the range.
    pub nr_pages: u64,
    /// The node the range belongs to.
    pub node: NodeId,
}

/// A callback's answer: `NOTIFY_OK` or `NOTIFY_BAD`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotifyResult {
    /// `NOTIFY_OK`: go on.
    Ok,
    /// `NOTIFY_BAD`: refuse (meaningful for the `Going*` events) and stop
    /// the walk.
    Bad,
}

/// A registered callback, as `register_memory_notifier` returns it, to
/// unregister.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NotifierId(u64);

/// A callback of the chain.
pub type MemoryNotifierFn =
    Box<dyn FnMut(MemoryAction, &MemoryNotify) -> NotifyResult + Send + Sync>;

/// The chain: callbacks by priority.
///
/// Invariant: `blocks` is sorted by priority, highest first, and in
/// registration order among equal priorities.
#[derive(Default)]
pub(crate) struct MemoryNotifierChain {
    blocks: Vec<(i32, NotifierId, MemoryNotifierFn)>,
    next_id: u64,
}

impl MemoryNotifierChain {
    /// `register_memory_notifier` with a priority
    /// (`hotplug_memory_notifier(fn, pri)`).
    pub(crate) fn register(&mut self, priority: i32, callback: MemoryNotifierFn) -> NotifierId {
        let id = NotifierId(self.next_id);
        self.next_id += 1;
        let at = self
            .blocks
            .iter()
            .position(|&(p, _, _)| p < priority)
            .unwrap_or(self.blocks.len());
        self.blocks.insert(at, (priority, id, callback));
        debug_assert!(self.blocks.windows(2).all(|w| w[0].0 >= w[1].0));
        id
    }

    /// `unregister_memory_notifier`: whether `id` was registered.
    pub(crate) fn unregister(&mut self, id: NotifierId) -> bool {
        let before = self.blocks.len();
        self.blocks.retain(|(_, i, _)| *i != id);
        self.blocks.len() != before
    }

    /// `memory_notify(action, arg)`: calls each callback in order until
    /// one answers `NOTIFY_BAD`; whether all answered `NOTIFY_OK`.
    pub(crate) fn notify(&mut self, action: MemoryAction, arg: &MemoryNotify) -> NotifyResult {
        for (_, _, callback) in &mut self.blocks {
            if callback(action, arg) == NotifyResult::Bad {
                return NotifyResult::Bad;
            }
        }
        NotifyResult::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Higher priority first, registration order among equals, and the
    /// walk stops at the first refusal.
    #[test]
    fn callbacks_run_by_priority_and_a_refusal_stops_the_walk() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut chain = MemoryNotifierChain::default();
        let mut add = |name: &'static str, priority, answer| {
            let seen = Arc::clone(&seen);
            chain.register(
                priority,
                Box::new(move |_, _| {
                    seen.lock().unwrap().push(name);
                    answer
                }),
            )
        };
        add("low", 0, NotifyResult::Bad);
        add("high", 10, NotifyResult::Ok);
        let second = add("low-2", 0, NotifyResult::Ok);
        let arg = MemoryNotify {
            start_pfn: Pfn::new(0),
            nr_pages: 1,
            node: NodeId::ZERO,
        };
        assert_eq!(
            chain.notify(MemoryAction::GoingOnline, &arg),
            NotifyResult::Bad
        );
        assert_eq!(*seen.lock().unwrap(), ["high", "low"]);
        assert!(chain.unregister(second));
        assert!(!chain.unregister(second));
    }
}
