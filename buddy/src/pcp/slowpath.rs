//! The per-CPU handle's way into `__alloc_pages_slowpath`: the
//! allocator's slow path (`crate::slowpath`) with this CPU's cpuset, its
//! lists first for the orders they hold, and the context the slow path
//! hands each try (with or without `ALLOC_NOFRAGMENT`).

use sparsemem::{Order, Pfn};

use super::PerCpu;
use crate::error::RequestError;
use crate::gfp::AllocContext;
use crate::types::{BuddyModel, ZoneId};
use crate::variant::Variant;

impl<M: BuddyModel, V: Variant> PerCpu<'_, M, V> {
    /// `__alloc_pages_slowpath` for this CPU (`Allocator::alloc_pages_slowpath`
    /// with this CPU's cpuset and lists).
    #[cold]
    #[inline(never)]
    pub(super) fn alloc_pages_slowpath(
        &mut self,
        order: Order,
        ac: AllocContext,
        preferred: Option<ZoneId>,
    ) -> Result<Pfn, RequestError> {
        let cpuset = self.cpuset.take();
        let got = self.alloc.alloc_pages_slowpath(
            order,
            &ac,
            self.node,
            self.pcp_allowed_order(order),
            |zone| cpuset.as_ref().is_none_or(|m| m.test(zone.node)),
            |zid, ac| {
                let pfn = self.rmqueue_any(zid, *ac, order)?;
                Some(self.count_numa(preferred, zid, pfn))
            },
        );
        self.cpuset = cpuset;
        got
    }
}
