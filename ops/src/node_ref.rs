//! `NodeRef`: the reference-counted pointer behind [`Tensor`](crate::Tensor).
//!
//! It is `Arc<Node>` whose freed blocks are reused through the [`FreeList`]
//! of the thread that frees them (see there for why): a node made on one
//! thread and dropped on another lands on the second thread's list.

use crate::free_list::FreeList;
use crate::tensor::Node;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicUsize, Ordering};

struct RcNode {
    strong: AtomicUsize,
    node: Node,
}

const LAYOUT: Layout = Layout::new::<RcNode>();

thread_local! {
    /// At most 1024 blocks (~190 KiB) per thread.
    static FREE: FreeList = const { FreeList::new(LAYOUT, 1024) };
}

/// A counted reference to a tensor node; dereferences to the node.
pub(crate) struct NodeRef {
    ptr: NonNull<RcNode>,
}

// SAFETY: `NodeRef` is `Arc<Node>` with a different allocator: the count is
// atomic (acquire/release as in `Arc`, below), blocks are plain
// allocations that any thread may free, and the node is `Send + Sync`
// (checked below), so sending a handle or sharing one is sharing the node.
unsafe impl Send for NodeRef {}
// SAFETY: as above.
unsafe impl Sync for NodeRef {}

const fn assert_send_sync<T: Send + Sync>() {}
const _: () = assert_send_sync::<Node>();

impl NodeRef {
    /// A new node with a count of one. The node is made by `make` after
    /// the block is taken, so that it can be built in place (a node built
    /// first and then moved costs a `memcpy` call per tensor).
    #[inline(always)]
    pub(crate) fn new_with(make: impl FnOnce() -> Node) -> NodeRef {
        let block = FreeList::take(&FREE, LAYOUT).cast::<RcNode>();
        // SAFETY: `block` is non-null, valid for writes of an `RcNode` and
        // holds no live value (fresh, or listed after its node was dropped).
        // If `make` panics the block is leaked, never read.
        unsafe {
            block.write(RcNode { strong: AtomicUsize::new(1), node: make() });
            NodeRef { ptr: NonNull::new_unchecked(block) }
        }
    }

    /// True if both point at the same node.
    #[inline]
    pub(crate) fn ptr_eq(&self, other: &NodeRef) -> bool {
        self.ptr == other.ptr
    }

    /// The node's address (an identity key while the node is alive).
    #[inline]
    pub(crate) fn as_ptr(&self) -> *const () {
        self.ptr.as_ptr() as *const ()
    }

    /// True if this is the only reference to the node.
    #[inline]
    pub(crate) fn is_unique(&self) -> bool {
        // Acquire: the other references' drops happen before this answer.
        self.strong().load(Ordering::Acquire) == 1
    }

    #[inline]
    fn strong(&self) -> &AtomicUsize {
        // SAFETY: the block is live while any `NodeRef` to it exists.
        unsafe { &self.ptr.as_ref().strong }
    }
}

impl std::ops::Deref for NodeRef {
    type Target = Node;
    #[inline]
    fn deref(&self) -> &Node {
        // SAFETY: the block holds a live node while any `NodeRef` to it exists.
        unsafe { &self.ptr.as_ref().node }
    }
}

impl Clone for NodeRef {
    #[inline]
    fn clone(&self) -> NodeRef {
        // Relaxed like `Arc::clone`: a new reference is made from an
        // existing one, which already orders the accesses.
        if self.strong().fetch_add(1, Ordering::Relaxed) > isize::MAX as usize {
            std::process::abort();
        }
        NodeRef { ptr: self.ptr }
    }
}

impl Drop for NodeRef {
    #[inline]
    fn drop(&mut self) {
        if self.strong().fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Synchronizes with the other references' release decrements, so
        // their uses of the node happen before it is dropped (as in `Arc`).
        fence(Ordering::Acquire);
        let block = self.ptr.as_ptr();
        // SAFETY: this was the last reference: the node is dropped once
        // (which may drop other nodes, its tracer's tensors, before the
        // list is touched) and the block is handed over dead.
        unsafe {
            std::ptr::drop_in_place(&mut (*block).node);
            FreeList::give(&FREE, block.cast(), LAYOUT);
        }
    }
}
#[cfg(test)]
mod tests {
    use crate::Tensor;

    /// Nodes freed in a burst are reused by the next ones without mixing
    /// up values, identities or counts.
    #[test]
    fn reused_nodes_keep_values_and_identity() {
        for round in 0..3 {
            let ts: Vec<Tensor> = (0..2000).map(|i| Tensor::from_vec(vec![(i + round) as f64], [1])).collect();
            let copies: Vec<Tensor> = ts.iter().step_by(3).cloned().collect();
            drop(ts);
            for (k, c) in copies.iter().enumerate() {
                assert_eq!(c.to_vec::<f64>(), vec![(3 * k + round) as f64]);
            }
            let fresh = Tensor::from_vec(vec![-1.0f64], [1]);
            assert!(copies.iter().all(|c| !c.same_node(&fresh)));
            assert!(copies[0].same_node(&copies[0].clone()));
        }
    }
}
