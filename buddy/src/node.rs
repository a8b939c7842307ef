//! Nodes, zonelists, GFP requests and node masks.
//!
//! A node's zonelist lists every zone of every node in fallback order:
//! nodes by distance (here `|a - b|` of node ids, as with `numa=fake`),
//! and within a node the highest zone first, so an allocation that may use
//! `Normal` tries it before `DMA32` and `DMA`. `THISNODE` uses the node's
//! own zones only (`__GFP_THISNODE`).

use crate::zone::ZoneType;

/// A node mask (`nodemask_t`), sized for `MAX_NUMNODES` (1024).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct NodeMask([u64; 16]);

impl NodeMask {
    /// No node.
    pub fn empty() -> NodeMask {
        NodeMask([0; 16])
    }

    /// The given nodes.
    pub fn of(nodes: impl IntoIterator<Item = u16>) -> NodeMask {
        let mut m = NodeMask::empty();
        for n in nodes {
            m.set(n);
        }
        m
    }

    /// Adds a node.
    pub fn set(&mut self, node: u16) {
        self.0[usize::from(node / 64)] |= 1 << (node % 64);
    }

    /// `node_isset`.
    #[inline(always)]
    pub fn test(&self, node: u16) -> bool {
        self.0[usize::from(node / 64)] & (1 << (node % 64)) != 0
    }

    /// Nodes in the mask.
    pub fn count(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }
}

/// What an allocation may use (the parts of `gfp_t` pfnlab models).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Gfp {
    /// The highest zone type allowed (`gfp_zone`).
    pub highest_zone: ZoneType,
    /// `__GFP_THISNODE`: no fallback to other nodes.
    pub thisnode: bool,
}

impl Gfp {
    /// `GFP_KERNEL`: Normal and below.
    pub const KERNEL: Gfp = Gfp {
        highest_zone: ZoneType::Normal,
        thisnode: false,
    };
    /// `GFP_HIGHUSER_MOVABLE`: any zone.
    pub const MOVABLE: Gfp = Gfp {
        highest_zone: ZoneType::Movable,
        thisnode: false,
    };
    /// `GFP_DMA32`.
    pub const DMA32: Gfp = Gfp {
        highest_zone: ZoneType::Dma32,
        thisnode: false,
    };

    /// The same request with `__GFP_THISNODE`.
    pub const fn thisnode(self) -> Gfp {
        Gfp {
            thisnode: true,
            ..self
        }
    }
}

/// A node (`pglist_data`): its zones and zonelists (zone ids).
#[derive(Clone, Debug)]
pub struct Node {
    /// Node id.
    pub id: u16,
    /// Ids of this node's zones, lowest type first.
    pub zones: Vec<usize>,
    /// Fallback zonelist (`ZONELIST_FALLBACK`).
    pub zonelist: Vec<usize>,
    /// This node's zones only, highest first (`ZONELIST_NOFALLBACK`).
    pub zonelist_thisnode: Vec<usize>,
}

/// Builds every node's zonelists from `(zone id, node, type)` triples.
pub(crate) fn build_nodes(zones: &[(usize, u16, ZoneType)]) -> Vec<Node> {
    let mut ids: Vec<u16> = zones.iter().map(|z| z.1).collect();
    ids.sort_unstable();
    ids.dedup();
    let highest_first = |node: u16| {
        let mut own: Vec<(ZoneType, usize)> = zones
            .iter()
            .filter(|z| z.1 == node)
            .map(|z| (z.2, z.0))
            .collect();
        own.sort_by_key(|z| std::cmp::Reverse(z.0));
        own.into_iter().map(|(_, id)| id).collect::<Vec<_>>()
    };
    ids.iter()
        .map(|&id| {
            let mut by_distance = ids.clone();
            by_distance.sort_by_key(|&other| (other.abs_diff(id), other));
            let mut own_lowest_first = highest_first(id);
            let zonelist_thisnode = own_lowest_first.clone();
            own_lowest_first.reverse();
            Node {
                id,
                zones: own_lowest_first,
                zonelist: by_distance.iter().flat_map(|&n| highest_first(n)).collect(),
                zonelist_thisnode,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zonelists_prefer_near_nodes_and_high_zones() {
        use ZoneType::*;
        let nodes = build_nodes(&[(0, 0, Dma), (1, 0, Dma32), (2, 1, Normal), (3, 2, Normal)]);
        assert_eq!(nodes[0].zonelist, vec![1, 0, 2, 3]);
        assert_eq!(nodes[1].zonelist, vec![2, 1, 0, 3]);
        assert_eq!(nodes[0].zonelist_thisnode, vec![1, 0]);
        assert_eq!(nodes[0].zones, vec![0, 1]);
        let m = NodeMask::of([1, 700]);
        assert!(m.test(700) && m.test(1) && !m.test(0));
        assert_eq!(m.count(), 2);
    }
}
