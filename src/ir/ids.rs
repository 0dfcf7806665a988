//! The arena indices of the IR: values (`%3`), nodes (`n3`) and functions (`f3`).

use std::fmt;

macro_rules! entity {
    ($(#[$m:meta])* $name:ident, $prefix:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);
        impl $name {
            /// The arena index.
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

entity!(
    /// A value (an SSA tensor): a function parameter or a node output. Displays as `%3`.
    ValueId,
    "%"
);
entity!(
    /// A node (one op application). Displays as `n3`.
    NodeId,
    "n"
);
entity!(
    /// A function of the module: main, a named function or a closure. Displays as `f3`.
    FuncId,
    "f"
);
