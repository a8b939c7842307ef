//! Nodes, zonelists and node masks.
//!
//! A node's zonelist lists every zone of every node in fallback order:
//! nodes by distance (here `|a - b|` of node ids, as with `numa=fake`),
//! and within a node the highest zone first, so an allocation that may use
//! `Normal` tries it before `DMA32` and `DMA`. `THISNODE` uses the node's
//! own zones only (`__GFP_THISNODE`).

use sparsemem::{MAX_NUMNODES, NodeId};

use crate::gfp::Gfp;
use crate::types::{ZoneId, ZoneType};

/// Words in a [`NodeMask`]: one bit per possible node.
const NODEMASK_WORDS: usize = MAX_NUMNODES as usize / 64;

/// A node mask (`nodemask_t`), sized for `MAX_NUMNODES` (1024).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct NodeMask([u64; NODEMASK_WORDS]);

impl NodeMask {
    /// No node.
    pub fn empty() -> NodeMask {
        NodeMask([0; NODEMASK_WORDS])
    }

    /// The given nodes.
    pub fn of(nodes: impl IntoIterator<Item = NodeId>) -> NodeMask {
        let mut m = NodeMask::empty();
        for n in nodes {
            m.set(n);
        }
        m
    }

    /// Adds a node (`node_set`).
    pub fn set(&mut self, node: NodeId) {
        let n = usize::from(node.get());
        self.0[n / 64] |= 1 << (n % 64);
    }

    /// `node_isset`.
    #[inline(always)]
    pub fn test(&self, node: NodeId) -> bool {
        let n = usize::from(node.get());
        self.0[n / 64] & (1 << (n % 64)) != 0
    }

    /// Nodes in the mask.
    pub fn count(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }
}

/// A node (`pglist_data`): its zones and zonelists (zone ids).
#[derive(Clone, Debug)]
pub struct Node {
    /// Node id.
    pub id: NodeId,
    /// Ids of this node's zones, lowest type first.
    pub zones: Vec<ZoneId>,
    /// Fallback zonelist (`ZONELIST_FALLBACK`).
    pub zonelist: Vec<ZoneId>,
    /// This node's zones only, highest first (`ZONELIST_NOFALLBACK`).
    pub zonelist_thisnode: Vec<ZoneId>,
}

impl Node {
    /// `node_zonelist`: the fallback list, or with `__GFP_THISNODE` the
    /// node's own zones.
    #[inline(always)]
    pub(crate) fn zonelist(&self, gfp: Gfp) -> &[ZoneId] {
        if gfp.contains(Gfp::THISNODE) {
            &self.zonelist_thisnode
        } else {
            &self.zonelist
        }
    }
}

/// Builds every node's zonelists from `(zone id, node, type)` triples;
/// nodes come out sorted by id.
pub(crate) fn build_nodes(zones: &[(ZoneId, NodeId, ZoneType)]) -> Vec<Node> {
    let mut ids: Vec<NodeId> = zones.iter().map(|z| z.1).collect();
    ids.sort_unstable();
    ids.dedup();
    let highest_first = |node: NodeId| {
        let mut own: Vec<(ZoneType, ZoneId)> = zones
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
            by_distance.sort_by_key(|&other| (other.get().abs_diff(id.get()), other));
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
        let z = |ids: &[u8]| ids.iter().map(|&i| ZoneId::new(i)).collect::<Vec<_>>();
        let n = NodeId::new;
        let nodes = build_nodes(&[
            (ZoneId::new(0), n(0), Dma),
            (ZoneId::new(1), n(0), Dma32),
            (ZoneId::new(2), n(1), Normal),
            (ZoneId::new(3), n(2), Normal),
        ]);
        assert_eq!(nodes[0].zonelist, z(&[1, 0, 2, 3]));
        assert_eq!(nodes[1].zonelist, z(&[2, 1, 0, 3]));
        assert_eq!(nodes[0].zonelist_thisnode, z(&[1, 0]));
        assert_eq!(nodes[0].zones, z(&[0, 1]));
        let m = NodeMask::of([n(1), n(700), n(MAX_NUMNODES - 1)]);
        assert!(m.test(n(700)) && m.test(n(1)) && m.test(n(1023)) && !m.test(n(0)));
        assert_eq!(m.count(), 3);
    }
}
