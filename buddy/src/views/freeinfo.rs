//! `/proc/buddyinfo` and `/proc/pagetypeinfo` as values.
//!
//! buddyinfo (`frag_show_print`) is `nr_free` per order of each populated
//! zone; pagetypeinfo counts the blocks on each order's free list of each
//! migratetype (`pagetypeinfo_showfree_print`, which stops counting a list
//! at 100,000 and prints `>100000`) and the zone's pageblocks by their
//! migratetype (`pagetypeinfo_showblockcount_print`: one pfn per
//! pageblock from the zone's start, skipping pfns that are offline or of
//! another zone).

use std::fmt;

use sparsemem::{MIGRATE_TYPES, Migratetype, PageLayout, Pfn};

use crate::alloc::Allocator;
use crate::types::{BuddyModel, ZoneId};
use crate::variant::Variant;

pub use crate::types::FREECOUNT_CAP;

/// One populated zone's free blocks per order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneFree {
    /// Its node.
    pub node: u32,
    /// The kernel's zone name.
    pub zone: String,
    /// `free_area[order].nr_free`, for every order up to `MAX_PAGE_ORDER`.
    pub nr_free: Vec<u64>,
}

/// `/proc/buddyinfo`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct BuddyInfo {
    /// Every populated zone, node by node.
    pub zones: Vec<ZoneFree>,
}

/// One populated zone's part of `/proc/pagetypeinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneTypes {
    /// Its node.
    pub node: u32,
    /// The kernel's zone name.
    pub zone: String,
    /// Free blocks per migratetype (by [`Migratetype::index`]) and order,
    /// each at most [`FREECOUNT_CAP`].
    pub free: [Vec<u64>; MIGRATE_TYPES],
    /// Pageblocks per migratetype.
    pub blocks: [u64; MIGRATE_TYPES],
}

/// `/proc/pagetypeinfo`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PageTypeInfo {
    /// `pageblock_order`.
    pub pageblock_order: u32,
    /// Every populated zone, node by node.
    pub zones: Vec<ZoneTypes>,
}

impl fmt::Display for BuddyInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for z in &self.zones {
            write!(f, "Node {}, zone {:>8} ", z.node, z.zone)?;
            z.nr_free.iter().try_for_each(|n| write!(f, "{n:>6} "))?;
            f.write_str("\n")?;
        }
        Ok(())
    }
}

impl fmt::Display for PageTypeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let orders = self.zones.first().map_or(0, |z| z.free[0].len());
        for node in self.zones.chunk_by(|a, b| a.node == b.node) {
            writeln!(f, "Page block order: {}", self.pageblock_order)?;
            writeln!(f, "Pages per block:  {}", 1u64 << self.pageblock_order)?;
            writeln!(f)?;
            write!(f, "{:<43} ", "Free pages count per migrate type at order")?;
            (0..orders).try_for_each(|o| write!(f, "{o:>6} "))?;
            writeln!(f)?;
            for z in node {
                for mt in Migratetype::ALL {
                    write!(
                        f,
                        "Node {:>4}, zone {:>8}, type {:>12} ",
                        z.node,
                        z.zone,
                        mt.to_string()
                    )?;
                    for &n in &z.free[mt.index()] {
                        let over = if n >= FREECOUNT_CAP { ">" } else { "" };
                        write!(f, "{over}{n:>6} ")?;
                    }
                    writeln!(f)?;
                }
            }
            write!(f, "\n{:<23}", "Number of blocks type ")?;
            Migratetype::ALL
                .iter()
                .try_for_each(|mt| write!(f, "{:>12} ", mt.to_string()))?;
            writeln!(f)?;
            for z in node {
                write!(f, "Node {}, zone {:>8} ", z.node, z.zone)?;
                z.blocks.iter().try_for_each(|n| write!(f, "{n:>12} "))?;
                writeln!(f)?;
            }
        }
        Ok(())
    }
}

impl<M: BuddyModel, V: Variant> Allocator<M, V> {
    /// The model's `/proc/buddyinfo`: its zones with managed pages.
    pub fn buddyinfo(&self) -> BuddyInfo {
        let zones = self
            .populated_zones()
            .map(|z| ZoneFree {
                node: u32::from(z.node.get()),
                zone: z.kind.name().to_owned(),
                nr_free: z.nr_free()[..=z.max_order().index()].to_vec(),
            })
            .collect();
        BuddyInfo { zones }
    }

    /// The model's `/proc/pagetypeinfo`.
    pub fn pagetypeinfo(&self) -> PageTypeInfo {
        let g = self.model.geometry();
        let per_block = g.pageblock_nr_pages();
        let zones = self
            .populated_zones()
            .map(|z| {
                let orders = z.max_order().index() + 1;
                let area = z.free_area.lock();
                let free = std::array::from_fn(|mt| {
                    (0..orders)
                        .map(|o| area.lists[o][mt].len().min(FREECOUNT_CAP))
                        .collect()
                });
                drop(area);
                let mut blocks = [0; MIGRATE_TYPES];
                let mut pfn = z.start.get();
                while pfn < z.end.get() {
                    if self.counts_pageblock(z.id, Pfn::new(pfn)) {
                        blocks[self.model.get_pfnblock_migratetype(Pfn::new(pfn)).index()] += 1;
                    }
                    pfn += per_block;
                }
                ZoneTypes {
                    node: u32::from(z.node.get()),
                    zone: z.kind.name().to_owned(),
                    free,
                    blocks,
                }
            })
            .collect();
        PageTypeInfo {
            pageblock_order: u32::from(g.pageblock_order().get()),
            zones,
        }
    }

    /// Whether pagetypeinfo counts the pageblock probed at `pfn` for zone
    /// `zid` (`pagetypeinfo_showblockcount_print`): its page is online and
    /// in the zone. A page deferred init has not written is in no zone
    /// (its poison reads as `ZONE_DEVICE`), so a zone in deferred init
    /// counts only the pageblocks it has initialised.
    pub(crate) fn counts_pageblock(&self, zid: ZoneId, pfn: Pfn) -> bool {
        self.model
            .pfn_to_online_page(pfn)
            .is_some_and(|p| p.zone_id() == zid.get())
    }

    /// Zones with managed pages, node by node and each node's in type
    /// order, as `walk_zones_in_node` visits populated zones.
    fn populated_zones(&self) -> impl Iterator<Item = &crate::zone::Zone<V, M::Page>> {
        self.nodes.iter().flat_map(move |node| {
            let mut zones: Vec<_> = node
                .zones
                .iter()
                .map(|z| &self.zones[z.index()])
                .filter(|z| z.managed_pages() > 0)
                .collect();
            zones.sort_by_key(|z| z.kind);
            zones
        })
    }
}
