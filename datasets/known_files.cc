#include "datasets/known_files.h"

namespace asgd::datasets {

const std::vector<KnownDataset>& KnownDatasets() {
  // Digests of the files in the reference data set (see each dataset's README.md there):
  // download digests as published, content digests after gunzip.
  static const std::vector<KnownDataset> kTable = {
      {"mnist",
       {"https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"},
       {
           {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz",
            "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609", 9912422,
            "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"},
           {"train-labels-idx1-ubyte", "train-labels-idx1-ubyte.gz",
            "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c", 28881,
            "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"},
           {"t10k-images-idx3-ubyte", "t10k-images-idx3-ubyte.gz",
            "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6", 1648877,
            "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"},
           {"t10k-labels-idx1-ubyte", "t10k-labels-idx1-ubyte.gz",
            "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6", 4542,
            "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"},
       }},
      {"fashion-mnist",
       {"http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"},
       {
           {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz",
            "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84", 26421880,
            "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"},
           {"train-labels-idx1-ubyte", "train-labels-idx1-ubyte.gz",
            "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845", 29515,
            "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"},
           {"t10k-images-idx3-ubyte", "t10k-images-idx3-ubyte.gz",
            "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073", 4422102,
            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"},
           {"t10k-labels-idx1-ubyte", "t10k-labels-idx1-ubyte.gz",
            "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5", 5148,
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"},
       }},
      {"a9a",
       {"https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/"},
       {
           {"a9a", "a9a", "f5d5ffd8d865ff41328e7ee043e4b020816914ff6843ff15b98905ddbedce906",
            2329875, "f5d5ffd8d865ff41328e7ee043e4b020816914ff6843ff15b98905ddbedce906"},
           {"a9a.t", "a9a.t", "1f448a153f0320399a7e40836eb207655b0bde0f21fc941cc472193daa9f5de9",
            1164628, "1f448a153f0320399a7e40836eb207655b0bde0f21fc941cc472193daa9f5de9"},
       }},
  };
  return kTable;
}

const KnownDataset* FindKnownDataset(std::string_view name) {
  for (const KnownDataset& d : KnownDatasets()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

const KnownFile* FindKnownFile(std::string_view dataset, std::string_view file_name) {
  const KnownDataset* d = FindKnownDataset(dataset);
  if (d == nullptr) return nullptr;
  for (const KnownFile& f : d->files) {
    if (f.name == file_name) return &f;
  }
  return nullptr;
}

}  // namespace asgd::datasets
