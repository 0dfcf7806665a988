//! The values the importer tracks symbolically (`super::symbolic`): integer polynomials over
//! the model's named dynamic axes, and small integer tensors of them.

use std::collections::BTreeMap;

use crate::ir::dtype::DType;
use crate::ir::shape::{DYNAMIC_DIM, Shape};

/// Longest tensor tracked symbolically (shape vectors are short).
pub(crate) const MAX_ELEMENTS: usize = 16;

/// A polynomial with integer coefficients over dynamic axis names (each a size ≥ 1): monomial
/// (sorted names, repeated for powers) → coefficient, the empty monomial being the constant
/// term. Zero coefficients are never stored.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct Poly(BTreeMap<Vec<String>, i64>);

impl Poly {
    /// The terms: monomial (sorted axis names, repeated for powers; empty for the constant
    /// term) and its non-zero coefficient.
    pub(crate) fn terms(&self) -> impl Iterator<Item = (&Vec<String>, &i64)> {
        self.0.iter()
    }

    /// The constant `c`.
    pub(crate) fn constant(c: i64) -> Poly {
        let mut m = BTreeMap::new();
        if c != 0 {
            m.insert(vec![], c);
        }
        Poly(m)
    }

    /// The size of the dynamic axis `name`.
    pub(crate) fn var(name: &str) -> Poly {
        Poly(BTreeMap::from([(vec![name.to_string()], 1)]))
    }

    /// Dim `i` of `s`: its static size, or the polynomial its axis name stands for (a plain name,
    /// or a symbolic sum `=a+b+3` as Concatenate makes). `None` for anonymous axes.
    pub(crate) fn of_dim(s: &Shape, i: usize) -> Option<Poly> {
        let d = *s.dims.get(i)?;
        if d != DYNAMIC_DIM {
            return Some(Poly::constant(d));
        }
        let name = s.axis_name(i);
        if name.is_empty() || name == "?" {
            return None;
        }
        let Some(sum) = name.strip_prefix('=') else { return Some(Poly::var(name)) };
        let mut p = Poly::default();
        for t in sum.split('+').map(str::trim).filter(|t| !t.is_empty()) {
            p = p.add(&t.parse::<i64>().map_or_else(|_| Poly::var(t), Poly::constant))?;
        }
        Some(p)
    }

    /// The value when it is a constant.
    pub(crate) fn as_const(&self) -> Option<i64> {
        match self.0.len() {
            0 => Some(0),
            1 => self.0.get(&Vec::new()).copied(),
            _ => None,
        }
    }

    fn combine(&self, o: &Poly, sign: i64) -> Option<Poly> {
        let mut m = self.0.clone();
        for (k, &c) in &o.0 {
            let e = m.entry(k.clone()).or_insert(0);
            *e = e.checked_add(c.checked_mul(sign)?)?;
            if *e == 0 {
                m.remove(k);
            }
        }
        Some(Poly(m))
    }

    /// `self + o` (`None` on overflow).
    pub(crate) fn add(&self, o: &Poly) -> Option<Poly> {
        self.combine(o, 1)
    }

    /// `self - o` (`None` on overflow).
    pub(crate) fn sub(&self, o: &Poly) -> Option<Poly> {
        self.combine(o, -1)
    }

    /// `self * o` (`None` on overflow).
    pub(crate) fn mul(&self, o: &Poly) -> Option<Poly> {
        let mut out = Poly::default();
        for (ka, &ca) in &self.0 {
            for (kb, &cb) in &o.0 {
                let mut k = ka.clone();
                k.extend(kb.iter().cloned());
                k.sort();
                out = out.add(&Poly(BTreeMap::from([(k, ca.checked_mul(cb)?)])))?;
            }
        }
        Some(out)
    }

    /// ONNX integer division by `o`: truncating for constants; otherwise only an exact division
    /// by a single term (`6*a*b / 3*a` = `2*b`). `None` when neither applies.
    pub(crate) fn div(&self, o: &Poly) -> Option<Poly> {
        if let (Some(a), Some(b)) = (self.as_const(), o.as_const()) {
            return a.checked_div(b).map(Poly::constant);
        }
        let [(dk, &dc)] = o.0.iter().collect::<Vec<_>>()[..] else { return None };
        let mut out = BTreeMap::new();
        for (k, &c) in &self.0 {
            if dc == 0 || c % dc != 0 {
                return None;
            }
            let mut rest = k.clone();
            for v in dk {
                let at = rest.iter().position(|x| x == v)?;
                rest.remove(at);
            }
            out.insert(rest, c / dc);
        }
        Some(Poly(out))
    }

    /// The least value over axis sizes ≥ 1 when every non-constant coefficient is positive.
    fn lower_bound(&self) -> Option<i64> {
        let mut lo = 0i64;
        for (k, &c) in &self.0 {
            if !k.is_empty() && c < 0 {
                return None;
            }
            lo = lo.checked_add(c)?;
        }
        Some(lo)
    }

    /// Whether `self == o` is decided at import (`None`: it depends on the axis sizes).
    pub(crate) fn equals(&self, o: &Poly) -> Option<bool> {
        let d = self.sub(o)?;
        if let Some(c) = d.as_const() {
            return Some(c == 0);
        }
        let pos = d.lower_bound().is_some_and(|l| l > 0);
        let neg = Poly::default().sub(&d).and_then(|n| n.lower_bound()).is_some_and(|l| l > 0);
        if pos || neg { Some(false) } else { None }
    }

    /// The dynamic axis name that stands for this size, when the IR's names can say it: a name
    /// (`seq`), or a sum of distinct names plus a constant (`=a+b+1`, terms sorted as
    /// Concatenate writes them). `None` for constants, products, coefficients other than 1.
    pub(crate) fn axis_name(&self) -> Option<String> {
        let mut terms = vec![];
        let mut constant = 0;
        for (k, &c) in &self.0 {
            match k.as_slice() {
                [] => constant = c,
                [v] if c == 1 => terms.push(v.clone()),
                _ => return None,
            }
        }
        match (terms.len(), constant) {
            (0, _) => None,
            (1, 0) => terms.pop(),
            _ => {
                terms.sort();
                let mut s = format!("={}", terms.join("+"));
                if constant != 0 {
                    s.push_str(&format!("+{constant}"));
                }
                Some(s)
            }
        }
    }
}

impl std::fmt::Display for Poly {
    /// `2*batch*seq+1`; `0` for the zero polynomial.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return write!(f, "0");
        }
        // Highest degree first, the constant last.
        let mut terms: Vec<(&Vec<String>, &i64)> = self.0.iter().collect();
        terms.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
        for (i, (k, &c)) in terms.into_iter().enumerate() {
            if i > 0 && c >= 0 {
                write!(f, "+")?;
            }
            let mut parts: Vec<String> = vec![];
            if k.is_empty() || c != 1 {
                parts.push(c.to_string());
            }
            parts.extend(k.iter().cloned());
            write!(f, "{}", parts.join("*"))?;
        }
        Ok(())
    }
}

/// A tracked integer (or decided boolean) tensor of rank ≤ 1.
#[derive(Clone, Debug)]
pub(crate) struct SymVal {
    /// The element type of the ONNX value.
    pub dtype: DType,
    /// `[]` or `[len]`.
    pub dims: Vec<i64>,
    /// The elements, row-major (booleans as 0 / 1).
    pub elems: Vec<Poly>,
}

impl SymVal {
    pub(crate) fn new(dtype: DType, dims: Vec<i64>, elems: Vec<Poly>) -> Option<SymVal> {
        (elems.len() <= MAX_ELEMENTS).then_some(SymVal { dtype, dims, elems })
    }

    pub(crate) fn is_const(&self) -> bool {
        self.elems.iter().all(|p| p.as_const().is_some())
    }
}
