"""kernelkit kernels are scikit-learn kernels: tune an SVC's RBF length scale with GridSearchCV."""
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.svm import SVC

from kernelkit import RBF

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0)
search = GridSearchCV(SVC(kernel=RBF()), {"kernel__length_scale": [10.0, 22.4, 50.0]}, cv=3)
search.fit(X_train, y_train)
print(search.best_params_, f"test accuracy {search.score(X_test, y_test):.3f}")
