//! Planning: the compute grant, the plan that projects every run of the catalog onto the
//! pods before the deadline, the forecasts it rests on, where pod time went, and the
//! checkpoint interval that wastes the least of it.

pub mod advice;
mod catalog_plan;
pub mod forecast;
mod grant;
pub mod planner;
mod pod_time;
pub mod speed;
