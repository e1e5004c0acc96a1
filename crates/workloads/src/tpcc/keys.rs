//! TPC-C's tables, their record words, and the composite keys packed into a `u64`.
//!
//! Every key of a warehouse's data carries the warehouse (0-based, `w`) in its top
//! [`W_BITS`] bits, so one function of the key places every table by warehouse (the
//! partition is `w / warehouses_per_node`), and the district (0-based, `d`) in the next
//! [`D_BITS`]; the low [`REST_BITS`] are the table's own:
//!
//! | table | key below `w << 48 \| d << 44` |
//! | --- | --- |
//! | WAREHOUSE | 0 (and `d = 0`) |
//! | DISTRICT | 0 |
//! | CUSTOMER | `c` (1-based, < 2^12) |
//! | HISTORY | `c << 20 \| n`: the customer's `n`-th payment (`C_PAYMENT_CNT` after it), kept with the customer |
//! | NEW-ORDER, ORDER | `o` (1-based, < 2^32) |
//! | ORDER-LINE | `o << 4 \| ol` (`ol` 1..=15) |
//! | ORDER_BY_CUSTOMER | `c << 32 \| o` (ordered: a customer's newest order is the last) |
//! | CUSTOMER_BY_NAME | `last << 28 \| first << 12 \| c` (ordered: by last name, then first) |
//! | STOCK | `i` (item id, 1-based, < 2^17) |
//! | ITEM (replicated) | `i` |

use atoll_storage::TableId;

pub const WAREHOUSE: TableId = TableId(0);
pub const DISTRICT: TableId = TableId(1);
pub const CUSTOMER: TableId = TableId(2);
pub const HISTORY: TableId = TableId(3);
pub const NEW_ORDER: TableId = TableId(4);
pub const ORDER: TableId = TableId(5);
pub const ORDER_LINE: TableId = TableId(6);
pub const ITEM: TableId = TableId(7);
pub const STOCK: TableId = TableId(8);
/// Secondary index: a customer's orders, newest last.
pub const ORDER_BY_CUSTOMER: TableId = TableId(9);
/// Secondary index: a district's customers by (last name, first name).
pub const CUSTOMER_BY_NAME: TableId = TableId(10);

pub const W_BITS: u32 = 16;
pub const D_BITS: u32 = 4;
pub const REST_BITS: u32 = 64 - W_BITS - D_BITS;
const W_SHIFT: u32 = 64 - W_BITS;
const D_SHIFT: u32 = REST_BITS;

/// Warehouses in a cluster: every `w` fits [`W_BITS`].
pub const WAREHOUSES_MAX: u64 = 1 << W_BITS;
/// Districts per warehouse (spec 1.2.1).
pub const DISTRICTS: u64 = 10;
/// Customers per district: every `c` (1-based) fits 12 bits.
pub const CUSTOMERS_MAX: u64 = (1 << C_BITS) - 1;
const C_BITS: u32 = 12;
/// Order ids (1-based) fit 32 bits.
pub const ORDER_ID_MAX: u64 = (1 << O_BITS) - 1;
const O_BITS: u32 = 32;
/// Order lines per order (spec 2.4.1.3: 5..=15).
pub const ORDER_LINES_MIN: u64 = 5;
pub const ORDER_LINES_MAX: u64 = 15;
const OL_BITS: u32 = 4;
/// Item ids (1-based) fit 17 bits; one id above the loaded ones is the unused item.
pub const ITEMS_MAX: u64 = 100_000;
/// Last names are numbers 0..=999 spelled with three syllables (spec 4.3.2.3).
pub const LAST_NAMES: u64 = 1000;
const LAST_SHIFT: u32 = 28;
/// First names are codes below 2^16 (their spelling is not stored).
pub const FIRST_NAMES: u64 = 1 << 16;
const FIRST_SHIFT: u32 = C_BITS;
/// A customer's payments (HISTORY rows) fit 20 bits.
pub const PAYMENTS_MAX: u64 = (1 << H_BITS) - 1;
const H_BITS: u32 = 20;

const _: () = assert!(DISTRICTS < 1 << D_BITS);
const _: () = assert!(ORDER_LINES_MAX < 1 << OL_BITS);
const _: () = assert!(O_BITS + OL_BITS <= REST_BITS);
const _: () = assert!(C_BITS + O_BITS <= REST_BITS);
const _: () = assert!(C_BITS + H_BITS <= REST_BITS);
const _: () = assert!(LAST_NAMES <= 1 << (REST_BITS - LAST_SHIFT));
const _: () = assert!(FIRST_SHIFT + 16 == LAST_SHIFT);

/// The warehouse/district prefix of every key; `w < WAREHOUSES_MAX`, `d < DISTRICTS`.
pub fn wd(w: u64, d: u64) -> u64 {
    debug_assert!(w < WAREHOUSES_MAX && d < DISTRICTS, "w {w}, d {d}");
    w << W_SHIFT | d << D_SHIFT
}

pub fn warehouse_of(key: u64) -> u64 {
    key >> W_SHIFT
}

pub fn district_of(key: u64) -> u64 {
    (key >> D_SHIFT) & ((1 << D_BITS) - 1)
}

/// The table's own bits of a key.
pub fn rest_of(key: u64) -> u64 {
    key & ((1 << REST_BITS) - 1)
}

pub fn warehouse(w: u64) -> u64 {
    wd(w, 0)
}

pub fn district(w: u64, d: u64) -> u64 {
    wd(w, d)
}

pub fn customer(w: u64, d: u64, c: u64) -> u64 {
    debug_assert!((1..=CUSTOMERS_MAX).contains(&c), "c {c}");
    wd(w, d) | c
}

pub fn history(w: u64, d: u64, c: u64, n: u64) -> u64 {
    debug_assert!(n <= PAYMENTS_MAX, "n {n}");
    debug_assert!((1..=CUSTOMERS_MAX).contains(&c), "c {c}");
    wd(w, d) | c << H_BITS | n
}

pub fn order(w: u64, d: u64, o: u64) -> u64 {
    debug_assert!((1..=ORDER_ID_MAX).contains(&o), "o {o}");
    wd(w, d) | o
}

pub fn order_line(w: u64, d: u64, o: u64, ol: u64) -> u64 {
    debug_assert!((1..=ORDER_LINES_MAX).contains(&ol), "ol {ol}");
    wd(w, d) | o << OL_BITS | ol
}

/// The order id and line number of an ORDER-LINE key.
pub fn order_line_parts(key: u64) -> (u64, u64) {
    let r = rest_of(key);
    (r >> OL_BITS, r & ((1 << OL_BITS) - 1))
}

pub fn order_by_customer(w: u64, d: u64, c: u64, o: u64) -> u64 {
    debug_assert!(o <= ORDER_ID_MAX, "o {o}");
    wd(w, d) | c << O_BITS | o
}

/// The order id of an ORDER_BY_CUSTOMER key.
pub fn order_by_customer_order(key: u64) -> u64 {
    key & ORDER_ID_MAX
}

pub fn customer_by_name(w: u64, d: u64, last: u64, first: u64, c: u64) -> u64 {
    debug_assert!(last < LAST_NAMES && first < FIRST_NAMES && c <= CUSTOMERS_MAX);
    wd(w, d) | last << LAST_SHIFT | first << FIRST_SHIFT | c
}

/// The customer id of a CUSTOMER_BY_NAME key.
pub fn customer_by_name_customer(key: u64) -> u64 {
    key & CUSTOMERS_MAX
}

/// The keys of every customer named `last` in a district: `[lo, hi]`.
pub fn customer_by_name_range(w: u64, d: u64, last: u64) -> (u64, u64) {
    (
        customer_by_name(w, d, last, 0, 0),
        customer_by_name(w, d, last, FIRST_NAMES - 1, CUSTOMERS_MAX),
    )
}

pub fn stock(w: u64, i: u64) -> u64 {
    debug_assert!(i < 1 << REST_BITS);
    wd(w, 0) | i
}

pub fn item(i: u64) -> u64 {
    i
}

// Record words (after the engine's words). Money is in cents; a signed amount (C_BALANCE)
// is an `i64` stored as its two's-complement word; a null date or carrier is 0. Strings
// are not stored (fixed-size word records): names are their numbers, and the "ORIGINAL"
// mark of I_DATA / S_DATA is a flag word.

/// WAREHOUSE: W_TAX (basis points), W_YTD.
pub const W_TAX: usize = 0;
pub const W_YTD: usize = 1;
pub const WAREHOUSE_WORDS: u32 = 2;

/// DISTRICT: D_TAX, D_YTD, D_NEXT_O_ID, and the oldest order not yet delivered (where the
/// Delivery scan of NEW-ORDER starts, so it does not walk deleted keys).
pub const D_TAX: usize = 0;
pub const D_YTD: usize = 1;
pub const D_NEXT_O_ID: usize = 2;
pub const D_NEXT_DELIVERY_O_ID: usize = 3;
pub const DISTRICT_WORDS: u32 = 4;

/// CUSTOMER.
pub const C_LAST: usize = 0;
pub const C_FIRST: usize = 1;
/// 0 good credit ("GC"), 1 bad ("BC").
pub const C_CREDIT: usize = 2;
pub const C_CREDIT_LIM: usize = 3;
/// Basis points.
pub const C_DISCOUNT: usize = 4;
pub const C_BALANCE: usize = 5;
pub const C_YTD_PAYMENT: usize = 6;
pub const C_PAYMENT_CNT: usize = 7;
pub const C_DELIVERY_CNT: usize = 8;
/// A hash of what Payment appended to C_DATA for a bad-credit customer.
pub const C_DATA: usize = 9;
pub const CUSTOMER_WORDS: u32 = 10;

/// HISTORY.
pub const H_C_ID: usize = 0;
pub const H_C_D_ID: usize = 1;
pub const H_C_W_ID: usize = 2;
pub const H_D_ID: usize = 3;
pub const H_W_ID: usize = 4;
pub const H_DATE: usize = 5;
pub const H_AMOUNT: usize = 6;
pub const HISTORY_WORDS: u32 = 7;

/// NEW-ORDER: NO_O_ID.
pub const NEW_ORDER_WORDS: u32 = 1;

/// ORDER.
pub const O_C_ID: usize = 0;
pub const O_ENTRY_D: usize = 1;
pub const O_CARRIER_ID: usize = 2;
pub const O_OL_CNT: usize = 3;
pub const O_ALL_LOCAL: usize = 4;
pub const ORDER_WORDS: u32 = 5;

/// ORDER-LINE.
pub const OL_I_ID: usize = 0;
pub const OL_SUPPLY_W_ID: usize = 1;
pub const OL_DELIVERY_D: usize = 2;
pub const OL_QUANTITY: usize = 3;
pub const OL_AMOUNT: usize = 4;
pub const ORDER_LINE_WORDS: u32 = 5;

/// ITEM.
pub const I_IM_ID: usize = 0;
pub const I_PRICE: usize = 1;
/// 1 if I_DATA holds "ORIGINAL".
pub const I_ORIGINAL: usize = 2;
pub const ITEM_WORDS: u32 = 3;

/// STOCK.
pub const S_QUANTITY: usize = 0;
pub const S_YTD: usize = 1;
pub const S_ORDER_CNT: usize = 2;
pub const S_REMOTE_CNT: usize = 3;
pub const S_ORIGINAL: usize = 4;
pub const STOCK_WORDS: u32 = 5;

/// ORDER_BY_CUSTOMER and CUSTOMER_BY_NAME: one word (the order id, the customer id).
pub const INDEX_WORDS: u32 = 1;

/// Syllables of last names (spec 4.3.2.3).
const SYLLABLES: [&str; 10] = [
    "BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING",
];

/// The spelling of last name `n` (0..=999): its three digits' syllables.
pub fn last_name(n: u64) -> String {
    let digit = |k: u64| SYLLABLES[(k % 10) as usize];
    format!("{}{}{}", digit(n / 100), digit(n / 10), digit(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tpcc_keys_keep_warehouse_district_and_own_fields_apart() {
        let w = WAREHOUSES_MAX - 1;
        let k = order_line(w, 9, ORDER_ID_MAX, ORDER_LINES_MAX);
        assert_eq!((warehouse_of(k), district_of(k)), (w, 9));
        assert_eq!(order_line_parts(k), (ORDER_ID_MAX, ORDER_LINES_MAX));
        let h = history(3, 2, CUSTOMERS_MAX, PAYMENTS_MAX);
        assert_eq!((warehouse_of(h), district_of(h)), (3, 2));
        assert_eq!(rest_of(h), CUSTOMERS_MAX << 20 | PAYMENTS_MAX);
        let n = customer_by_name(5, 1, LAST_NAMES - 1, FIRST_NAMES - 1, 7);
        assert_eq!(customer_by_name_customer(n), 7);
        let (lo, hi) = customer_by_name_range(5, 1, LAST_NAMES - 1);
        assert!(lo <= n && n <= hi);
        assert!(customer_by_name_range(5, 1, 3).1 < customer_by_name(5, 1, 4, 0, 0));
        let o = order_by_customer(1, 1, 9, 77);
        assert_eq!(order_by_customer_order(o), 77);
        assert!(order_by_customer(1, 1, 9, ORDER_ID_MAX) < order_by_customer(1, 1, 10, 0));
    }

    #[test]
    fn tpcc_last_names_are_spelled_from_the_syllables() {
        assert_eq!(last_name(371), "PRICALLYOUGHT");
        assert_eq!(last_name(0), "BARBARBAR");
        assert_eq!(last_name(999), "EINGEINGEING");
    }
}
