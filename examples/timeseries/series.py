"""A synthetic long time series: one trading day at one-second resolution (23,400 steps, 6.5
hours), made of what intraday data has: a U-shaped volatility over the day, cycles from a
minute to an hour with random phases, and autocorrelated noise. Every day is drawn from a
seeded generator, so two training runs see the same days."""
import math

import torch

TRADING_DAY = 23_400  # seconds from 9:30 to 16:00


def days(batch: int, length: int, generator: torch.Generator, device: str) -> torch.Tensor:
    """[batch, length] values, scaled to about unit variance."""
    t = torch.arange(length, device=device, dtype=torch.float32)
    day = t / TRADING_DAY
    volatility = 0.6 + 1.6 * (day - 0.5) ** 2  # busy open and close, quiet lunch
    periods = torch.tensor([60.0, 300.0, 900.0, 3600.0], device=device)
    amplitude = torch.rand(batch, 4, 1, generator=generator, device=device) + 0.25
    phase = 2 * math.pi * torch.rand(batch, 4, 1, generator=generator, device=device)
    cycles = (amplitude * torch.sin(2 * math.pi * t / periods[:, None] + phase)).sum(dim=1)
    shocks = torch.randn(batch, length, generator=generator, device=device)
    # AR(1) noise through a cumulative filter: x_t = 0.9 x_{t-1} + e_t, computed as a
    # convolution with 0.9^k truncated at 64 lags (0.9^64 < 0.002).
    kernel = 0.9 ** torch.arange(63, -1, -1, device=device, dtype=torch.float32)
    noise = torch.nn.functional.conv1d(torch.nn.functional.pad(shocks[:, None], (63, 0)),
                                       kernel[None, None])[:, 0]
    series = volatility * (cycles + 0.3 * noise)
    return series / series.std(dim=1, keepdim=True)


def time_features(length: int, device: str) -> torch.Tensor:
    """[length, 4]: the time of day as two sine / cosine pairs (a day, an hour)."""
    t = torch.arange(length, device=device, dtype=torch.float32)
    angles = torch.stack([2 * math.pi * t / TRADING_DAY, 2 * math.pi * t / 3600.0], dim=-1)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)
