"""A star-rating regression over MovieLens-shaped ids: an elastune workload from outside elastune."""

from movie_ratings.data import Catalogue, Ratings
from movie_ratings.workload import RatingModel, RatingsOptions, RatingsWorkload

__all__ = ["Catalogue", "RatingModel", "Ratings", "RatingsOptions", "RatingsWorkload"]
