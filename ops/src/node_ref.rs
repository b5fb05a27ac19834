//! `NodeRef`: the reference-counted pointer behind [`Tensor`](crate::Tensor).
//!
//! It is `Rc<Node>` with one difference: freed node blocks go to a
//! per-thread free list and are reused by the next node. Every op at every
//! transform level makes nodes (an eager result, a vmap or jvp wrapper, a
//! staged variable), tens per transformed call, and they are freed in bursts
//! when a transform returns; the system allocator handles such bursts of
//! ~190-byte blocks slowly (they overflow its per-thread cache). A free
//! list is a pointer swap. Like `Rc`, a `NodeRef` never leaves its thread.

use crate::tensor::Node;
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::NonNull;

struct RcNode {
    strong: Cell<usize>,
    node: Node,
}

/// Blocks kept per thread at most (~190 KiB); the rest go back to the
/// system allocator.
const MAX_FREE: usize = 1024;

/// A singly linked list threaded through the freed blocks themselves.
struct FreeList {
    head: Cell<*mut FreeBlock>,
    len: Cell<usize>,
}

struct FreeBlock {
    next: *mut FreeBlock,
}

const _: () = assert!(std::mem::size_of::<FreeBlock>() <= std::mem::size_of::<RcNode>());
const _: () = assert!(std::mem::align_of::<FreeBlock>() <= std::mem::align_of::<RcNode>());

impl Drop for FreeList {
    fn drop(&mut self) {
        let mut p = self.head.get();
        while !p.is_null() {
            // SAFETY: every block on the list was allocated with
            // `Layout::new::<RcNode>()`, holds no live node, and starts with
            // the `FreeBlock` link written when it was pushed.
            unsafe {
                let next = (*p).next;
                dealloc(p.cast(), Layout::new::<RcNode>());
                p = next;
            }
        }
    }
}

thread_local! {
    static FREE: FreeList = const { FreeList { head: Cell::new(std::ptr::null_mut()), len: Cell::new(0) } };
}

/// A counted reference to a tensor node (see the module docs).
pub(crate) struct NodeRef {
    ptr: NonNull<RcNode>,
    /// Not `Send` or `Sync`, exactly like `Rc`.
    _not_send: PhantomData<std::rc::Rc<Node>>,
}

impl NodeRef {
    /// A new node with a count of one.
    #[inline]
    pub(crate) fn new(node: Node) -> NodeRef {
        let reused = FREE
            .try_with(|f| {
                let head = f.head.get();
                if head.is_null() {
                    return None;
                }
                // SAFETY: `head` is a block on this thread's free list (see
                // `release`), so it is valid for reads of its link.
                f.head.set(unsafe { (*head).next });
                f.len.set(f.len.get() - 1);
                Some(head.cast::<RcNode>())
            })
            .ok()
            .flatten();
        let block = match reused {
            Some(p) => p,
            None => {
                let layout = Layout::new::<RcNode>();
                // SAFETY: `RcNode` has a non-zero size.
                let p = unsafe { alloc(layout) }.cast::<RcNode>();
                if p.is_null() {
                    handle_alloc_error(layout);
                }
                p
            }
        };
        // SAFETY: `block` is valid for writes of an `RcNode` and holds no
        // live value (fresh, or released after its node was dropped).
        unsafe { block.write(RcNode { strong: Cell::new(1), node }) };
        // SAFETY: `block` is non-null (checked or taken from the list).
        NodeRef { ptr: unsafe { NonNull::new_unchecked(block) }, _not_send: PhantomData }
    }

    /// The node.
    #[inline]
    pub(crate) fn node(&self) -> &Node {
        // SAFETY: the block holds a live node while any `NodeRef` to it exists.
        unsafe { &self.ptr.as_ref().node }
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

    /// Returns a block whose node was dropped to the free list, or to the
    /// system allocator when the list is full or the thread is exiting.
    fn release(block: *mut RcNode) {
        let kept = FREE
            .try_with(|f| {
                if f.len.get() >= MAX_FREE {
                    return false;
                }
                let b = block.cast::<FreeBlock>();
                // SAFETY: the block is valid for writes and its node was
                // dropped; the link overwrites its first bytes.
                unsafe { b.write(FreeBlock { next: f.head.get() }) };
                f.head.set(b);
                f.len.set(f.len.get() + 1);
                true
            })
            .unwrap_or(false);
        if !kept {
            // SAFETY: allocated with this layout, node already dropped.
            unsafe { dealloc(block.cast(), Layout::new::<RcNode>()) };
        }
    }
}

impl Clone for NodeRef {
    #[inline]
    fn clone(&self) -> NodeRef {
        // SAFETY: the block is live while `self` exists.
        let strong = unsafe { &self.ptr.as_ref().strong };
        let n = strong.get();
        if n == usize::MAX {
            std::process::abort();
        }
        strong.set(n + 1);
        NodeRef { ptr: self.ptr, _not_send: PhantomData }
    }
}

impl Drop for NodeRef {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the block is live while `self` exists.
        let strong = unsafe { &self.ptr.as_ref().strong };
        let n = strong.get() - 1;
        strong.set(n);
        if n == 0 {
            let block = self.ptr.as_ptr();
            // SAFETY: this was the last reference: the node is dropped once,
            // and the block is not read again except through `release`.
            // Dropping the node may drop other nodes (its tracer's tensors),
            // which touches the free list only after this borrow ends.
            unsafe { std::ptr::drop_in_place(&mut (*block).node) };
            NodeRef::release(block);
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
