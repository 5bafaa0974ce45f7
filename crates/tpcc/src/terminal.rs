//! A terminal's input generator (clause 2.1–2.8 inputs): the transaction mix, home and remote
//! warehouses, NURand customer and item ids, customer selection by last name, and dispatch to
//! the five transactions in `txn.rs`, with the terminal's [`WriterMode`] for the three that
//! write (a conflicted one is retried with the same input inside `txn.rs`, so the generator's
//! sequence does not depend on conflicts).

use crate::engine::Engine;
use crate::error::TpccResult;
use crate::rng::{last_name, NuRandC, Rng};
use crate::schema::{CUSTOMERS, DISTRICTS};
use crate::txn::{
    delivery_with, new_order_with, order_status, payment_with, stock_level, CustomerSel,
    DeliveryInput, LineInput, NewOrderInput, OrderStatusInput, Outcome, PaymentInput,
    StockLevelInput, TxKind, WriterMode,
};

/// One terminal's input generator: home warehouse, Stock-Level district, NURand constants, a
/// shuffled deck of 100 cards for the mix (clause 5.2.4.2), and HISTORY ids.
#[derive(Debug, Clone)]
pub struct Terminal {
    /// Terminal number (0-based).
    pub id: usize,
    /// Home warehouse.
    pub w: u16,
    /// Stock-Level district.
    pub sl_d: u8,
    /// Warehouses in the database.
    pub warehouses: u16,
    /// Items in the database.
    pub items: u32,
    /// Run-time NURand constants.
    pub c: NuRandC,
    /// How New-Order, Payment and Delivery take their write transactions (default
    /// [`WriterMode::Concurrent`], which is the exclusive writer on engines without concurrent
    /// writers).
    pub writers: WriterMode,
    rng: Rng,
    deck: Vec<TxKind>,
    deck_pos: usize,
    run_no: u32,
    history_seq: u32,
}

impl Terminal {
    /// Terminal `id` of a run over `warehouses` × `items`, seeded from `seed`; `run_no` makes
    /// HISTORY ids unique across runs.
    pub fn new(id: usize, warehouses: u16, items: u32, seed: u64, run_no: u32) -> Terminal {
        let w = (id % warehouses.max(1) as usize) as u16 + 1;
        let sl_d = ((id / warehouses.max(1) as usize) % DISTRICTS as usize) as u8 + 1;
        let mut deck = Vec::with_capacity(100);
        for k in TxKind::ALL {
            deck.extend(std::iter::repeat_n(k, k.weight()));
        }
        Terminal {
            id,
            w,
            sl_d,
            warehouses,
            items,
            c: NuRandC::RUN,
            writers: WriterMode::default(),
            rng: Rng::derive(seed, 0x7E57_0000 + id as u64),
            deck,
            deck_pos: 100,
            run_no,
            history_seq: 0,
        }
    }

    /// The next transaction type from the shuffled deck.
    pub fn next_kind(&mut self) -> TxKind {
        if self.deck_pos >= self.deck.len() {
            for i in (1..self.deck.len()).rev() {
                let j = self.rng.range(0, i as u64) as usize;
                self.deck.swap(i, j);
            }
            self.deck_pos = 0;
        }
        let k = self.deck[self.deck_pos];
        self.deck_pos += 1;
        k
    }

    fn other_warehouse(&mut self) -> u16 {
        if self.warehouses <= 1 {
            return self.w;
        }
        let o = self.rng.range(1, self.warehouses as u64 - 1) as u16;
        if o >= self.w {
            o + 1
        } else {
            o
        }
    }

    fn customer_sel(&mut self) -> CustomerSel {
        if self.rng.range(1, 100) <= 60 {
            CustomerSel::LastName(last_name(self.rng.nurand(255, self.c.c_last, 0, 999)))
        } else {
            CustomerSel::Id(self.rng.nurand(1023, self.c.c_id, 1, CUSTOMERS as u64) as u16)
        }
    }

    /// New-Order input: 1% with an unused item id in the last line, 1% remote lines.
    pub fn new_order_input(&mut self) -> NewOrderInput {
        let d = self.rng.range(1, DISTRICTS as u64) as u8;
        let c = self.rng.nurand(1023, self.c.c_id, 1, CUSTOMERS as u64) as u16;
        let n = self.rng.range(5, 15) as usize;
        let rollback = self.rng.range(1, 100) == 1;
        let mut lines = Vec::with_capacity(n);
        for i in 0..n {
            let i_id = if rollback && i == n - 1 {
                self.items + 1
            } else {
                self.rng.nurand(8191, self.c.ol_i_id, 1, self.items as u64) as u32
            };
            let supply_w = if self.warehouses > 1 && self.rng.range(1, 100) == 1 {
                self.other_warehouse()
            } else {
                self.w
            };
            lines.push(LineInput {
                i_id,
                supply_w,
                quantity: self.rng.range(1, 10) as u8,
            });
        }
        NewOrderInput {
            w: self.w,
            d,
            c,
            lines,
        }
    }

    /// Payment input: 15% remote, 60% by last name.
    pub fn payment_input(&mut self) -> PaymentInput {
        let d = self.rng.range(1, DISTRICTS as u64) as u8;
        let (c_w, c_d) = if self.warehouses > 1 && self.rng.range(1, 100) > 85 {
            (
                self.other_warehouse(),
                self.rng.range(1, DISTRICTS as u64) as u8,
            )
        } else {
            (self.w, d)
        };
        let customer = self.customer_sel();
        let amount = self.rng.range(100, 500_000) as i64;
        self.history_seq = self.history_seq.wrapping_add(1);
        let history_id = (1u64 << 63)
            | ((self.run_no as u64 & 0x7FFF) << 48)
            | ((self.id as u64 & 0xFFFF) << 32)
            | self.history_seq as u64;
        PaymentInput {
            w: self.w,
            d,
            c_w,
            c_d,
            customer,
            amount,
            history_id,
        }
    }

    /// Order-Status input: 60% by last name.
    pub fn order_status_input(&mut self) -> OrderStatusInput {
        let d = self.rng.range(1, DISTRICTS as u64) as u8;
        OrderStatusInput {
            w: self.w,
            d,
            customer: self.customer_sel(),
        }
    }

    /// Delivery input.
    pub fn delivery_input(&mut self) -> DeliveryInput {
        DeliveryInput {
            w: self.w,
            carrier: self.rng.range(1, 10) as u8,
        }
    }

    /// Stock-Level input (the terminal's fixed district, threshold 10..=20).
    pub fn stock_level_input(&mut self) -> StockLevelInput {
        StockLevelInput {
            w: self.w,
            d: self.sl_d,
            threshold: self.rng.range(10, 20) as i32,
        }
    }

    /// Generates the input for `kind` and executes it (the writers retried on conflicts with
    /// that same input; [`Outcome::retries`] counts them).
    pub fn execute<E: Engine>(&mut self, engine: &E, kind: TxKind) -> TpccResult<Outcome> {
        match kind {
            TxKind::NewOrder => {
                let i = self.new_order_input();
                new_order_with(engine, self.writers, &i)
            }
            TxKind::Payment => {
                let i = self.payment_input();
                payment_with(engine, self.writers, &i)
            }
            TxKind::OrderStatus => {
                let i = self.order_status_input();
                order_status(engine, &i)
            }
            TxKind::Delivery => {
                let i = self.delivery_input();
                delivery_with(engine, self.writers, &i)
            }
            TxKind::StockLevel => {
                let i = self.stock_level_input();
                stock_level(engine, &i)
            }
        }
    }
}
