//! Shapes, strides and views: how a tensor's elements sit in its storage, broadcasting, and the
//! argument types that let users write `[2, 3]`, `-1` or `[0, 2]` for shapes and dims.

use crate::device::error::{Error, Result};

/// A shape argument: `[2, 3]`, `&[2, 3]`, `vec![2, 3]`, `6` or `()` (a 0-dim scalar).
pub trait IntoShape {
    fn into_shape(self) -> Vec<usize>;
}
impl<const N: usize> IntoShape for [usize; N] {
    fn into_shape(self) -> Vec<usize> {
        self.to_vec()
    }
}
impl IntoShape for &[usize] {
    fn into_shape(self) -> Vec<usize> {
        self.to_vec()
    }
}
impl IntoShape for Vec<usize> {
    fn into_shape(self) -> Vec<usize> {
        self
    }
}
impl IntoShape for &Vec<usize> {
    fn into_shape(self) -> Vec<usize> {
        self.clone()
    }
}
impl IntoShape for usize {
    fn into_shape(self) -> Vec<usize> {
        vec![self]
    }
}
impl IntoShape for () {
    fn into_shape(self) -> Vec<usize> {
        vec![]
    }
}

/// One dimension index; negative counts from the end, as in PyTorch.
pub trait Dim: Copy {
    fn as_i64(self) -> i64;
}
macro_rules! dim_int {
    ($($t:ty),*) => {$(impl Dim for $t { fn as_i64(self) -> i64 { self as i64 } })*};
}
dim_int!(i32, i64, isize, usize, u32);

/// Several dimension indices: `1`, `[0, 2]`, `&[-1]`, `vec![0]`.
pub trait Dims {
    fn dims(&self) -> Vec<i64>;
}
impl<D: Dim> Dims for D {
    fn dims(&self) -> Vec<i64> {
        vec![self.as_i64()]
    }
}
impl<D: Dim, const N: usize> Dims for [D; N] {
    fn dims(&self) -> Vec<i64> {
        self.iter().map(|d| d.as_i64()).collect()
    }
}
impl<D: Dim> Dims for &[D] {
    fn dims(&self) -> Vec<i64> {
        self.iter().map(|d| d.as_i64()).collect()
    }
}
impl<D: Dim> Dims for Vec<D> {
    fn dims(&self) -> Vec<i64> {
        self.iter().map(|d| d.as_i64()).collect()
    }
}

/// Resolves a possibly negative dim against `rank`.
pub fn resolve_dim(op: &'static str, dim: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let d = if dim < 0 { dim + r } else { dim };
    if rank == 0 && (dim == 0 || dim == -1) {
        // PyTorch lets a 0-dim tensor be reduced over dim 0 / -1.
        return Ok(0);
    }
    if d < 0 || d >= r {
        return Err(Error::DimOutOfRange { op, dim, rank });
    }
    Ok(d as usize)
}

/// Resolves a list of dims, rejecting repeats.
pub fn resolve_dims(op: &'static str, dims: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        let r = resolve_dim(op, d, rank)?;
        if out.contains(&r) {
            return Err(Error::invalid(
                op,
                format!("dim {d} appears more than once in {dims:?}"),
            ));
        }
        out.push(r);
    }
    Ok(out)
}

/// The number of elements of `shape`, or an error when it overflows.
pub fn numel_checked(op: impl Into<&'static str>, shape: &[usize]) -> Result<usize> {
    let op = op.into();
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::SizeOverflow {
            op,
            shape: shape.to_vec(),
        })
}

pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1].max(1);
    }
    strides
}

/// The shape two shapes broadcast to (NumPy rules: align right, sizes equal or 1).
pub fn broadcast_shapes(
    op: impl Into<&'static str>,
    a: &[usize],
    b: &[usize],
) -> Result<Vec<usize>> {
    let op = op.into();
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            (x, y) => {
                return Err(Error::ShapeMismatch {
                    op,
                    lhs: a.to_vec(),
                    rhs: b.to_vec(),
                    why: format!(
                        "they cannot broadcast: aligned from the right, dimension {i} has sizes {x} and {y}, \
                         and broadcasting needs them equal or one of them 1. Reshape one (e.g. `.unsqueeze(..)`) or transpose it."
                    ),
                });
            }
        };
    }
    Ok(out)
}

/// Where a tensor's elements sit in its storage: element `idx` is at
/// `offset + Σ idx[i]·strides[i]`. Strides of 0 repeat an element (broadcast views).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub offset: usize,
}

impl Layout {
    pub fn contiguous(shape: Vec<usize>) -> Layout {
        let strides = contiguous_strides(&shape);
        Layout {
            shape,
            strides,
            offset: 0,
        }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Row-major and gap-free (size-1 dims may have any stride). An empty layout is contiguous,
    /// as in PyTorch: it has no element to be out of place.
    pub fn is_contiguous(&self) -> bool {
        if self.shape.contains(&0) {
            return true;
        }
        let mut expected = 1;
        for (&d, &s) in self.shape.iter().zip(&self.strides).rev() {
            if d != 1 && s != expected {
                return false;
            }
            expected *= d;
        }
        true
    }

    /// This layout seen with `shape` (broadcast): new leading dims and size-1 dims get stride 0.
    pub fn broadcast_to(&self, shape: &[usize]) -> Layout {
        let extra = shape.len() - self.rank();
        let mut strides = vec![0; shape.len()];
        for i in 0..self.rank() {
            strides[i + extra] = if self.shape[i] == 1 && shape[i + extra] != 1 {
                0
            } else {
                self.strides[i]
            };
        }
        Layout {
            shape: shape.to_vec(),
            strides,
            offset: self.offset,
        }
    }

    pub fn permuted(&self, perm: &[usize]) -> Layout {
        Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    /// The storage offset of the element at row-major position `linear`.
    pub fn offset_of(&self, mut linear: usize) -> usize {
        let mut off = self.offset;
        for (&d, &s) in self.shape.iter().zip(&self.strides).rev() {
            if d > 1 {
                off += (linear % d) * s;
                linear /= d;
            }
        }
        off
    }

    /// The strides of a reshape of this layout into `shape` without copying, if one exists
    /// (PyTorch's `view` rule: each group of merged dims must be contiguous within itself).
    pub fn view_strides(&self, shape: &[usize]) -> Option<Vec<usize>> {
        if self.is_contiguous() {
            return Some(contiguous_strides(shape));
        }
        // Drop size-1 dims, then walk both shapes matching products of sizes.
        let old: Vec<(usize, usize)> = self
            .shape
            .iter()
            .zip(&self.strides)
            .filter(|(d, _)| **d != 1)
            .map(|(d, s)| (*d, *s))
            .collect();
        let mut new_strides = vec![0; shape.len()];
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < shape.len() {
            if j < shape.len() && shape[j] == 1 {
                new_strides[j] = 1;
                j += 1;
                continue;
            }
            if i >= old.len() || j >= shape.len() {
                return None;
            }
            // A chunk of old dims i..ie (contiguous among themselves) = new dims j..je.
            let (mut po, mut pn) = (old[i].0, shape[j]);
            let (mut ie, mut je) = (i + 1, j + 1);
            while po != pn {
                if po < pn {
                    if ie >= old.len() || old[ie - 1].1 != old[ie].0 * old[ie].1 {
                        return None;
                    }
                    po *= old[ie].0;
                    ie += 1;
                } else {
                    if je >= shape.len() {
                        return None;
                    }
                    pn *= shape[je];
                    je += 1;
                }
            }
            for k in i..ie - 1 {
                if old[k].1 != old[k + 1].0 * old[k + 1].1 {
                    return None;
                }
            }
            let mut stride = old[ie - 1].1;
            for k in (j..je).rev() {
                new_strides[k] = stride;
                stride *= shape[k];
            }
            i = ie;
            j = je;
        }
        Some(new_strides)
    }
}

/// Merges adjacent dims that are contiguous with each other in every layout and drops size-1
/// dims, so strided loops run over as few, as long, dims as possible. All layouts share a shape.
pub fn coalesce(layouts: &[&Layout]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let shape = &layouts[0].shape;
    let mut out_shape: Vec<usize> = Vec::new();
    let mut out_strides: Vec<Vec<usize>> = vec![Vec::new(); layouts.len()];
    for (d, &size) in shape.iter().enumerate() {
        if size == 1 {
            continue;
        }
        let mergeable = !out_shape.is_empty()
            && layouts
                .iter()
                .enumerate()
                .all(|(k, l)| *out_strides[k].last().unwrap() == l.strides[d] * size);
        if mergeable {
            *out_shape.last_mut().unwrap() *= size;
            for (k, l) in layouts.iter().enumerate() {
                *out_strides[k].last_mut().unwrap() = l.strides[d];
            }
        } else {
            out_shape.push(size);
            for (k, l) in layouts.iter().enumerate() {
                out_strides[k].push(l.strides[d]);
            }
        }
    }
    (out_shape, out_strides)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_rules() {
        assert_eq!(broadcast_shapes("add", &[2, 3], &[3]).unwrap(), vec![2, 3]);
        assert_eq!(
            broadcast_shapes("add", &[4, 1], &[1, 5]).unwrap(),
            vec![4, 5]
        );
        assert_eq!(broadcast_shapes("add", &[], &[2, 2]).unwrap(), vec![2, 2]);
        let e = broadcast_shapes("add", &[2, 3], &[4])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[2, 3] and [4]") && e.contains("sizes 3 and 4"),
            "{e}"
        );
    }

    #[test]
    fn views_of_transposes() {
        let l = Layout::contiguous(vec![2, 3, 4]).permuted(&[0, 2, 1]);
        assert!(!l.is_contiguous());
        assert_eq!(l.view_strides(&[2, 12]), None);
        assert_eq!(l.view_strides(&[2, 4, 3, 1]), Some(vec![12, 1, 4, 1]));
        let n = Layout {
            shape: vec![2, 3],
            strides: vec![4, 1],
            offset: 1,
        };
        assert_eq!(n.view_strides(&[6]), None);
        assert_eq!(n.view_strides(&[2, 1, 3]), Some(vec![4, 1, 1]));
    }

    #[test]
    fn coalesces_contiguous_runs() {
        let a = Layout::contiguous(vec![2, 3, 4]);
        let b = Layout::contiguous(vec![3, 4]).broadcast_to(&[2, 3, 4]);
        let (shape, strides) = coalesce(&[&a, &b]);
        assert_eq!(shape, vec![2, 12]);
        assert_eq!(strides, vec![vec![12, 1], vec![0, 1]]);
    }
}
